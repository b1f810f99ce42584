"""The monitor over HTTP: a pod's endpoint (served by the test on 127.0.0.1) and a
Prometheus HTTP API stand-in; errors become ScrapeError with a reason."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from trainplan.monitor import ScrapeError, query_prometheus, scrape

pytestmark = pytest.mark.asyncio

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


@pytest_asyncio.fixture()
async def server() -> AsyncIterator[str]:
    app = web.Application()
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
            await scrape(session, "http://127.0.0.1:9/metrics", timeout_seconds=1.0)


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
