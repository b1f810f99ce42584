"""Reading training metrics over the network: a pod's `/metrics` endpoint, or a
Prometheus server's HTTP API. Does network I/O (aiohttp)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from trainplan.monitor.metrics import (
    GPU_FIELDS,
    TrainingMetrics,
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
    """Metrics could not be read; the message says why (for MetricsAvailable=False)."""


async def scrape(
    session: aiohttp.ClientSession, url: str, timeout_seconds: float = 5.0
) -> TrainingMetrics:
    """GET and parse one metrics endpoint."""
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=timeout_seconds)
        ) as response:
            if response.status != 200:
                raise ScrapeError(f"{url} answered HTTP {response.status}")
            text = await response.text()
    except (TimeoutError, aiohttp.ClientError) as error:
        raise ScrapeError(f"cannot scrape {url}: {error or type(error).__name__}") from error
    try:
        return parse_metrics(text)
    except ValueError as error:
        raise ScrapeError(f"{url} did not serve the Prometheus text format: {error}") from error


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
        raise ScrapeError(f"cannot query Prometheus at {prometheus_url}: {error}") from error
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise ScrapeError(f"Prometheus refused {query}: {payload}")
    result: list[dict[str, Any]] = payload.get("data", {}).get("result", [])
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
    return training_metrics(scalars, gpus)
