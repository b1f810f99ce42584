"""Reading training metrics over the network: a pod's `/metrics` endpoint, or a
Prometheus server's HTTP API. Does network I/O (aiohttp)."""

from __future__ import annotations

import aiohttp

from trainplan.monitor.metrics import TrainingMetrics, parse_metrics
from trainplan.runtime.schema import (
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


async def query_prometheus(
    session: aiohttp.ClientSession,
    prometheus_url: str,
    selector: str,
    timeout_seconds: float = 5.0,
) -> TrainingMetrics:
    """The training series through a Prometheus server: `max(<metric>{<selector>})` for
    each, e.g. selector `namespace="team-a",plan="llama"`."""
    values: dict[str, float | None] = {}
    names = (
        TRAIN_STEP.name,
        TRAIN_TOTAL_STEPS.name,
        TRAIN_TOKENS.name,
        TRAIN_LOSS.name,
        TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name,
        TRAIN_CHECKPOINT_STEP.name,
    )
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    for name in names:
        query = f"max({name}{{{selector}}})"
        try:
            async with session.get(url, params={"query": query}, timeout=timeout) as response:
                payload = await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError) as error:
            raise ScrapeError(f"cannot query Prometheus at {prometheus_url}: {error}") from error
        if not isinstance(payload, dict) or payload.get("status") != "success":
            raise ScrapeError(f"Prometheus refused {query}: {payload}")
        result = payload.get("data", {}).get("result", [])
        values[name] = float(result[0]["value"][1]) if result else None

    def as_int(name: str) -> int | None:
        value = values.get(name)
        return None if value is None else int(value)

    return TrainingMetrics(
        step=as_int(TRAIN_STEP.name),
        total_steps=as_int(TRAIN_TOTAL_STEPS.name),
        tokens=as_int(TRAIN_TOKENS.name),
        loss=values.get(TRAIN_LOSS.name),
        last_step_timestamp_seconds=values.get(TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name),
        checkpoint_step=as_int(TRAIN_CHECKPOINT_STEP.name),
    )
