"""The monitor over HTTP: a pod's endpoint (served by the test on 127.0.0.1) and a
Prometheus HTTP API stand-in; errors become ScrapeError with a reason."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from trainplan.monitor import ScrapeError, ScrapeLimits, query_prometheus, scrape

pytestmark = pytest.mark.asyncio

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

EXPOSITION = (
    "# TYPE trainplan_train_step gauge\ntrainplan_train_step 42\n"
    "# TYPE trainplan_train_total_steps gauge\ntrainplan_train_total_steps 100\n"
)


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(text=EXPOSITION)


async def _broken(_: web.Request) -> web.Response:
    return web.Response(text="{ nope")


async def _missing(_: web.Request) -> web.Response:
    return web.Response(status=404)


async def _prometheus(request: web.Request) -> web.Response:
    query = request.query["query"]
    values = {"trainplan_train_step": "42", "trainplan_train_total_steps": "100"}
    result = [
        {"metric": {}, "value": [0, value]} for name, value in values.items() if name in query
    ]
    if query.startswith("trainplan_gpu_utilization_ratio{"):  # one GPU on each of two pods
        result = [
            {"metric": {"pod": pod, "gpu": "0"}, "value": [0, ratio]}
            for pod, ratio in (("job-0-a", "0.5"), ("job-1-b", "0.7"))
        ]
    return web.json_response(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    )


async def _prometheus_placeholders(request: web.Request) -> web.Response:
    """A run that has not reported yet: the reporter's placeholders (0, NaN)."""
    value = "NaN" if "trainplan_train_loss" in request.query["query"] else "0"
    result = (
        []
        if request.query["query"].startswith("trainplan_gpu_")
        else [{"metric": {}, "value": [0, value]}]
    )
    return web.json_response(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    )


SECRET = "aws-secret-access-key-0123456789"
"""What an internal endpoint would answer (the cloud metadata service, say)."""


async def _broken_with_secret(_: web.Request) -> web.Response:
    return web.Response(text=f"trainplan_train_step {{{SECRET}\n")


async def _large(_: web.Request) -> web.Response:
    return web.Response(text="# " + "x" * (2 << 20) + "\n" + EXPOSITION)


async def _many_series(_: web.Request) -> web.Response:
    lines = (f'trainplan_gpu_power_watts{{gpu="{i}"}} 1\n' for i in range(20_000))
    return web.Response(text="".join(lines) + EXPOSITION)


@pytest_asyncio.fixture()
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/secret-page", _broken_with_secret)
    app.router.add_get("/large", _large)
    app.router.add_get("/many", _many_series)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/broken", _broken)
    app.router.add_get("/missing", _missing)
    app.router.add_get("/api/v1/query", _prometheus)
    app.router.add_get("/placeholders/api/v1/query", _prometheus_placeholders)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_scrape_a_pod_endpoint(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        metrics = await scrape(session, f"{server}/metrics")
    assert (metrics.step, metrics.total_steps) == (42, 100)


@pytest.mark.parametrize(("path", "needle"), [("/broken", "text format"), ("/missing", "404")])
async def test_scrape_errors_say_why(server: str, path: str, needle: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError, match=needle):
            await scrape(session, f"{server}{path}")


async def test_scrape_of_a_closed_port_is_a_scrape_error() -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError, match="cannot scrape"):
            await scrape(session, "http://127.0.0.1:9/metrics", ScrapeLimits(timeout_seconds=1.0))


async def test_query_prometheus(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        metrics = await query_prometheus(session, server, 'namespace="a",plan="b"')
    assert (metrics.step, metrics.total_steps, metrics.tokens) == (42, 100, None)
    assert [(g.gpu, g.utilization_ratio) for g in metrics.gpus] == [
        ("job-0-a/0", 0.5),
        ("job-1-b/0", 0.7),
    ]


async def test_query_prometheus_reads_placeholders_as_unknown(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        metrics = await query_prometheus(session, f"{server}/placeholders", 'plan="b"')
    assert metrics.step == 0
    assert (metrics.loss, metrics.total_steps, metrics.checkpoint_step) == (None, None, None)
    assert metrics.gpus == ()


@pytest_asyncio.fixture()
async def internal() -> AsyncIterator[tuple[str, list[str]]]:
    """An internal endpoint that must never be fetched, and the paths it was asked for."""
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(text=SECRET)

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", asked
    await runner.cleanup()


async def test_a_redirect_is_refused_and_never_followed(
    internal: tuple[str, list[str]],
) -> None:
    target, asked = internal

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound(f"{target}/latest/meta-data/iam/security-credentials/")

    app = web.Application()
    app.router.add_get("/metrics", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ScrapeError, match="HTTP 302: redirects are refused") as raised:
                await scrape(session, f"http://127.0.0.1:{port}/metrics")
    finally:
        await runner.cleanup()
    assert asked == []
    assert SECRET not in str(raised.value)
    assert "meta-data" not in str(raised.value)


async def test_a_scrape_error_never_quotes_the_page(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError, match="text format") as raised:
            await scrape(session, f"{server}/secret-page")
    assert SECRET not in str(raised.value)


async def test_a_page_over_the_size_limit_is_refused(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError, match="over the 1048576-byte limit"):
            await scrape(session, f"{server}/large", ScrapeLimits(max_bytes=1 << 20))
        metrics = await scrape(session, f"{server}/large", ScrapeLimits(max_bytes=4 << 20))
    assert metrics.step == 42


async def test_a_page_too_slow_to_parse_is_a_scrape_error_and_the_loop_stays_free(
    server: str,
) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ScrapeError, match="parsing its page took over"):
                await scrape(session, f"{server}/many", ScrapeLimits(parse_timeout_seconds=0.01))
            metrics = await scrape(session, f"{server}/many", ScrapeLimits(max_bytes=4 << 20))
    finally:
        ticker.cancel()
    assert metrics.step == 42
    assert len(metrics.gpus) == 20_000
    assert ticks > 0  # the loop ran while the page was parsed in a thread


async def test_every_scrape_error_has_a_reason() -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError) as raised:
            await scrape(session, "http://127.0.0.1:9/metrics", ScrapeLimits(timeout_seconds=1.0))
    reason = str(raised.value).split("cannot scrape http://127.0.0.1:9/metrics:")[1]
    assert reason.strip()


@contextlib.asynccontextmanager
async def _serving(path: str, handler: Handler) -> AsyncIterator[str]:
    """One handler at `path` on 127.0.0.1; yields the server's base URL."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_compressed_page_is_bounded_by_its_decompressed_size() -> None:
    # 16 MiB of comment in a gzip of a few KiB: the limit counts what is decompressed.
    bomb = gzip.compress(("# " + "x" * (16 << 20) + "\n" + EXPOSITION).encode())

    async def compressed(_: web.Request) -> web.Response:
        return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})

    async with _serving("/metrics", compressed) as base, aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError, match="over the 1048576-byte limit"):
            await scrape(session, f"{base}/metrics", ScrapeLimits(max_bytes=1 << 20))


@pytest.mark.parametrize(
    "payload",
    [
        {"status": "success", "data": []},
        {"status": "success", "data": {"result": {"not": "a vector"}}},
        {"status": "success", "data": "text"},
    ],
)
async def test_prometheus_answering_an_unexpected_shape_is_a_scrape_error(
    payload: dict[str, object],
) -> None:
    async def odd(_: web.Request) -> web.Response:
        return web.json_response(payload)

    async with _serving("/api/v1/query", odd) as base, aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError, match="answered an unexpected result"):
            await query_prometheus(session, base, 'plan="b"')
