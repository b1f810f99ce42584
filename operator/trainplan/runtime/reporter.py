"""`TrainingReporter`: the training pods' Prometheus endpoint (DESIGN.md, "Metric names").

One reporter per process. Local rank 0 of each node serves `/metrics` over HTTP (its own
registry, never prometheus-client's global one) with the node's GPU series; global rank 0
adds the training series. On every other rank the reporter's methods return at once, so
the training loop can call them unconditionally.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TypedDict, Unpack
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from trainplan.runtime import schema
from trainplan.runtime.gpus import NvmlCollector

_WILDCARD_ADDRESSES = {"", "0.0.0.0", "::"}


class ReporterOptions(TypedDict, total=False):
    """The keyword arguments `from_environment` passes on to `TrainingReporter`."""

    global_rank: int
    local_rank: int
    address: str
    registry: CollectorRegistry | None
    gpu_collector: bool
    clock: Callable[[], float]
    monotonic: Callable[[], float]


class _TrainingSeries:
    """The training metrics of global rank 0, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(spec: schema.MetricSpec) -> Gauge:
            return Gauge(spec.name, spec.help, registry=registry)

        def histogram(spec: schema.MetricSpec) -> Histogram:
            return Histogram(spec.name, spec.help, buckets=spec.buckets_seconds, registry=registry)

        self.step = gauge(schema.TRAIN_STEP)
        self.total_steps = gauge(schema.TRAIN_TOTAL_STEPS)
        self.step_seconds = histogram(schema.TRAIN_STEP_SECONDS)
        self.tokens = gauge(schema.TRAIN_TOKENS)
        self.loss = gauge(schema.TRAIN_LOSS)
        self.last_step_timestamp_seconds = gauge(schema.TRAIN_LAST_STEP_TIMESTAMP_SECONDS)
        self.checkpoint_step = gauge(schema.TRAIN_CHECKPOINT_STEP)
        self.checkpoint_seconds = histogram(schema.TRAIN_CHECKPOINT_SECONDS)


class TrainingReporter:
    """Exports a training process's progress and its node's GPUs to Prometheus.

    `port` None starts no server (the series are still in `registry`); 0 binds a free
    port (see `port` and `url`). `clock` gives the Unix time of the last-step timestamp;
    `monotonic` times steps. Thread-safe.
    """

    def __init__(
        self,
        *,
        total_steps: int,
        port: int | None,
        global_rank: int = 0,
        local_rank: int = 0,
        address: str = "0.0.0.0",
        registry: CollectorRegistry | None = None,
        gpu_collector: bool = True,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.global_rank = global_rank
        self.local_rank = local_rank
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # (monotonic time, step) of the previous step() call or checkpoint; None after a
        # start or resume, so that the next step observes nothing.
        self._previous: tuple[float, int] | None = None
        self._series = _TrainingSeries(self.registry) if global_rank == 0 else None
        if self._series is not None:
            self._series.total_steps.set(total_steps)
            self._series.loss.set(math.nan)  # no loss yet: a gap in graphs, not a 0
        self._gpus: NvmlCollector | None = None
        if local_rank == 0 and gpu_collector:
            self._gpus = NvmlCollector()
            self.registry.register(self._gpus)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.url: str | None = None
        if local_rank == 0 and port is not None:
            try:
                self._server, self._thread = start_http_server(port, address, self.registry)
            except BaseException:
                self.close()  # release NVML
                raise
            self.port = int(self._server.server_address[1])
            self.url = _metrics_url(address, self.port)

    @classmethod
    def from_environment(
        cls,
        *,
        total_steps: int | None = None,
        port: int | None = None,
        **kwargs: Unpack[ReporterOptions],
    ) -> TrainingReporter:
        """A reporter configured by torchrun's and the launcher's environment.

        Ranks from `RANK` and `LOCAL_RANK` (default 0); the port from
        `TRAINPLAN_METRICS_PORT` (unset: no server); total steps from
        `TRAINPLAN_TOTAL_STEPS` (unset: 0, unknown). Arguments take precedence.
        """
        environ = os.environ
        if "global_rank" not in kwargs:
            kwargs["global_rank"] = _env_int(environ, schema.ENV_RANK) or 0
        if "local_rank" not in kwargs:
            kwargs["local_rank"] = _env_int(environ, schema.ENV_LOCAL_RANK) or 0
        if port is None:
            port = _env_int(environ, schema.ENV_METRICS_PORT)
        if total_steps is None:
            total_steps = _env_int(environ, schema.ENV_TOTAL_STEPS) or 0
        return cls(total_steps=total_steps, port=port, **kwargs)

    @property
    def exports_training(self) -> bool:
        """Whether this process exports the training series (global rank 0)."""
        return self._series is not None

    def step(
        self,
        step: int,
        tokens: int,
        loss: float | None = None,
        step_seconds: float | None = None,
    ) -> None:
        """Record a completed optimizer step: `step` (1-based) and cumulative `tokens`.

        `step_seconds` is the step's duration as the caller measured it; None takes the
        time since the previous call, divided by the steps completed since (call it every
        step, or every few; a call whose step did not advance observes nothing). The first
        call after the start or `resumed()` observes no duration: it would include warm-up
        or loading.
        """
        series = self._series
        if series is None:
            return
        now = self._monotonic()
        with self._lock:
            previous = self._previous
            self._previous = (now, step)
        if previous is not None:
            if step_seconds is None and step > previous[1]:
                step_seconds = (now - previous[0]) / (step - previous[1])
            if step_seconds is not None:
                series.step_seconds.observe(step_seconds)
        series.step.set(step)
        series.tokens.set(tokens)
        if loss is not None:
            series.loss.set(loss)
        series.last_step_timestamp_seconds.set(self._clock())

    def set_loss(self, loss: float) -> None:
        """Record the latest training loss (for frameworks that log it apart from the step)."""
        if self._series is not None:
            self._series.loss.set(loss)

    def set_total_steps(self, total_steps: int) -> None:
        """Record the run's total optimizer steps (when known only once training starts)."""
        if self._series is not None:
            self._series.total_steps.set(total_steps)

    def checkpoint(self, step: int, seconds: float) -> None:
        """Record a checkpoint of `step` that took `seconds` to write.

        Call it from the training loop right after a blocking save: the time up to this
        call is not counted in the next step's duration.
        """
        series = self._series
        if series is None:
            return
        self.reset_timer()
        series.checkpoint_step.set(step)
        series.checkpoint_seconds.observe(seconds)

    def reset_timer(self) -> None:
        """Leave the time since the previous step out of the next step's duration (call it
        after work between steps that is not training: evaluation, a checkpoint)."""
        if self._series is None:
            return
        now = self._monotonic()
        with self._lock:
            if self._previous is not None:
                self._previous = (now, self._previous[1])

    def resumed(self, step: int, tokens: int) -> None:
        """Record the state loaded from a checkpoint, without observing a step duration;
        the last-step timestamp becomes now."""
        series = self._series
        if series is None:
            return
        with self._lock:
            self._previous = None
        series.step.set(step)
        series.tokens.set(tokens)
        series.last_step_timestamp_seconds.set(self._clock())

    def close(self) -> None:
        """Stop the HTTP server and release NVML. Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()
        if self._gpus is not None:
            self.registry.unregister(self._gpus)
            self._gpus.close()
            self._gpus = None

    def __enter__(self) -> TrainingReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    """The integer in environment variable `name`, None when unset or empty."""
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _metrics_url(address: str, port: int) -> str:
    """The URL of the endpoint on this machine (the loopback address for a wildcard)."""
    host = address
    if host in _WILDCARD_ADDRESSES:
        host = "::1" if host == "::" else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/metrics"
