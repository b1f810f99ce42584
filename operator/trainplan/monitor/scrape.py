"""Reading training metrics over the network: a pod's `/metrics` endpoint, or a
Prometheus server's HTTP API. Does network I/O (aiohttp)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp

from trainplan.monitor.metrics import (
    GPU_FIELDS,
    TrainingMetrics,
    checkpoint_histogram_series,
    parse_metrics,
    training_metrics,
)
from trainplan.runtime.schema import (
    GPU_LABEL,
    TRAIN_CHECKPOINT_STEP,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    TRAIN_LOSS,
    TRAIN_STEP,
    TRAIN_TOKENS,
    TRAIN_TOTAL_STEPS,
)


class ScrapeError(Exception):
    """Metrics could not be read; the message says why (for MetricsAvailable=False). It
    never quotes what the endpoint sent: a page, a header or a value is a tenant's input."""


@dataclass(frozen=True, slots=True)
class ScrapeLimits:
    """Bounds on one pod scrape."""

    timeout_seconds: float = 5.0
    """The request, from connecting to the last byte."""
    max_bytes: int = 1 << 20
    """The largest page read; a larger one is refused."""
    parse_timeout_seconds: float = 2.0
    """Parsing the page (in a worker thread, off the event loop)."""


def _reason(error: BaseException) -> str:
    """What went wrong, by kind only (an exception's text may hold the peer's words)."""
    if isinstance(error, TimeoutError):
        return "timed out"
    return type(error).__name__


async def _read_page(response: aiohttp.ClientResponse, url: str, max_bytes: int) -> bytes:
    if response.content_length is not None and response.content_length > max_bytes:
        raise ScrapeError(f"{url} serves a page over the {max_bytes}-byte limit")
    page = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        page += chunk
        if len(page) > max_bytes:
            raise ScrapeError(f"{url} serves a page over the {max_bytes}-byte limit")
    return bytes(page)


async def scrape(
    session: aiohttp.ClientSession, url: str, limits: ScrapeLimits | None = None
) -> TrainingMetrics:
    """GET and parse one metrics endpoint: no redirect followed, the page bounded in size
    and parsed off the event loop within a time limit."""
    limits = limits or ScrapeLimits()
    try:
        async with session.get(
            url,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=limits.timeout_seconds),
        ) as response:
            if 300 <= response.status < 400:
                raise ScrapeError(f"{url} answered HTTP {response.status}: redirects are refused")
            if response.status != 200:
                raise ScrapeError(f"{url} answered HTTP {response.status}")
            page = await _read_page(response, url, limits.max_bytes)
    except (TimeoutError, aiohttp.ClientError) as error:
        raise ScrapeError(f"cannot scrape {url}: {_reason(error)}") from error
    text = page.decode("utf-8", errors="replace")
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(parse_metrics, text), limits.parse_timeout_seconds
        )
    except TimeoutError as error:
        raise ScrapeError(
            f"{url}: parsing its page took over {limits.parse_timeout_seconds:g} s"
        ) from error
    except ValueError as error:
        raise ScrapeError(f"{url} did not serve the Prometheus text format") from error


async def _query(
    session: aiohttp.ClientSession, prometheus_url: str, query: str, timeout_seconds: float
) -> list[dict[str, Any]]:
    """The result vector of one instant PromQL query."""
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    try:
        async with session.get(url, params={"query": query}, timeout=timeout) as response:
            payload = await response.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError) as error:
        raise ScrapeError(
            f"cannot query Prometheus at {prometheus_url}: {_reason(error)}"
        ) from error
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise ScrapeError(f"Prometheus refused {query}")
    data = payload.get("data")
    result = data.get("result", []) if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ScrapeError(f"Prometheus at {prometheus_url} answered an unexpected result")
    return result


async def query_prometheus(
    session: aiohttp.ClientSession,
    prometheus_url: str,
    selector: str,
    timeout_seconds: float = 5.0,
) -> TrainingMetrics:
    """The training series through a Prometheus server: `max(<metric>{<selector>})` for
    each, e.g. selector `namespace="team-a",plan="llama"`; and every node's GPU series,
    each GPU named `<pod or instance>/<gpu>`. The queries run at once; the reporter's
    placeholders mean "not known yet", as on a pod's page."""
    names = (
        TRAIN_STEP.name,
        TRAIN_TOTAL_STEPS.name,
        TRAIN_TOKENS.name,
        TRAIN_LOSS.name,
        TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name,
        TRAIN_CHECKPOINT_STEP.name,
        *checkpoint_histogram_series(),
    )
    training, *per_gpu = await asyncio.gather(
        asyncio.gather(
            *(
                _query(session, prometheus_url, f"max({name}{{{selector}}})", timeout_seconds)
                for name in names
            )
        ),
        *(
            _query(session, prometheus_url, f"{name}{{{selector}}}", timeout_seconds)
            for name in GPU_FIELDS
        ),
    )
    try:
        scalars = {
            name: float(result[0]["value"][1])
            for name, result in zip(names, training, strict=True)
            if result
        }
        gpus: dict[str, dict[str, float]] = {}
        for gpu_field, vector in zip(GPU_FIELDS.values(), per_gpu, strict=True):
            for series in vector:
                labels = series.get("metric", {})
                node = labels.get("pod") or labels.get("instance", "")
                gpu = f"{node}/{labels.get(GPU_LABEL, '')}"
                gpus.setdefault(gpu, {})[gpu_field] = float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise ScrapeError(
            f"Prometheus at {prometheus_url} answered an unexpected result"
        ) from error
    return training_metrics(scalars, gpus)
