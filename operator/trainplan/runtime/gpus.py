"""The GPU series: a prometheus-client collector that reads NVML at scrape time.

`NvmlCollector` initialises NVML once (nvidia-ml-py's `pynvml`, or a stand-in with the
same functions), and on every scrape reads each device's utilisation, memory and power.
Where NVML is absent (the module or its shared library cannot be loaded, or `nvmlInit`
fails: no GPU, no driver) it logs one warning and yields no series; it never raises into
the scrape, so the training series are served whatever the GPUs do. A query the device
does not support (e.g. power on some boards, utilisation of a MIG instance) leaves that
one sample out.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, cast

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from trainplan.runtime.schema import (
    GPU_LABEL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_POWER_WATTS,
    GPU_UTILIZATION_RATIO,
    MetricSpec,
)

logger = logging.getLogger("trainplan.runtime")

_T = TypeVar("_T")


class NvmlUtilization(Protocol):
    gpu: int  # percent of the sample period in which a kernel ran


class NvmlMemory(Protocol):
    used: int  # bytes
    total: int  # bytes


class NvmlApi(Protocol):
    """The part of `pynvml` that the collector uses."""

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> NvmlUtilization: ...  # noqa: N802
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> NvmlMemory: ...  # noqa: N802
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # noqa: N802  (milliwatts)


def _family(spec: MetricSpec) -> GaugeMetricFamily:
    return GaugeMetricFamily(spec.name, spec.help, labels=[GPU_LABEL])


class NvmlCollector(Collector):
    """Yields `trainplan_gpu_*` (label `gpu` = NVML index) for every device NVML sees.

    `nvml` is the NVML binding; None imports `pynvml`. Call `close()` to shut NVML down.
    """

    def __init__(self, nvml: NvmlApi | None = None) -> None:
        self._lock = threading.Lock()
        self._nvml: NvmlApi | None = None
        self._handles: list[tuple[str, Any]] = []
        self._query_failed = False
        try:
            api = nvml if nvml is not None else cast(NvmlApi, importlib.import_module("pynvml"))
            api.nvmlInit()
        except Exception as error:  # ImportError, pynvml.NVMLError_*, anything a driver raises
            logger.warning("NVML unavailable (%s): no trainplan_gpu_* series", error)
            return
        try:
            self._handles = [
                (str(index), api.nvmlDeviceGetHandleByIndex(index))
                for index in range(api.nvmlDeviceGetCount())
            ]
        except Exception as error:
            logger.warning("NVML cannot list the GPUs (%s): no trainplan_gpu_* series", error)
            api.nvmlShutdown()
            return
        self._nvml = api

    @property
    def available(self) -> bool:
        """Whether NVML was initialised (and not closed)."""
        return self._nvml is not None

    @property
    def device_count(self) -> int:
        return len(self._handles) if self._nvml is not None else 0

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families without samples, so the registry knows the names at register time."""
        for spec in (
            GPU_UTILIZATION_RATIO,
            GPU_MEMORY_USED_BYTES,
            GPU_MEMORY_TOTAL_BYTES,
            GPU_POWER_WATTS,
        ):
            yield _family(spec)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            nvml = self._nvml
            if nvml is None:
                return
            utilization = _family(GPU_UTILIZATION_RATIO)
            used = _family(GPU_MEMORY_USED_BYTES)
            total = _family(GPU_MEMORY_TOTAL_BYTES)
            power = _family(GPU_POWER_WATTS)
            for gpu, handle in self._handles:
                rates = self._query(nvml.nvmlDeviceGetUtilizationRates, handle)
                if rates is not None:
                    utilization.add_metric([gpu], rates.gpu / 100.0)  # NVML: percent
                memory = self._query(nvml.nvmlDeviceGetMemoryInfo, handle)
                if memory is not None:
                    used.add_metric([gpu], float(memory.used))
                    total.add_metric([gpu], float(memory.total))
                milliwatts = self._query(nvml.nvmlDeviceGetPowerUsage, handle)
                if milliwatts is not None:
                    power.add_metric([gpu], milliwatts / 1000.0)
        yield from (utilization, used, total, power)

    def close(self) -> None:
        """Shut NVML down (NVML counts initialisations); later scrapes yield nothing."""
        with self._lock:
            nvml, self._nvml = self._nvml, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception as error:
                logger.debug("nvmlShutdown failed: %s", error)

    def _query(self, read: Callable[[Any], _T], handle: Any) -> _T | None:
        """`read(handle)`, or None when NVML fails: the first failure logs a warning, later ones
        log at debug level (a scrape every few seconds must not flood the log)."""
        try:
            return read(handle)
        except Exception as error:
            level = logging.DEBUG if self._query_failed else logging.WARNING
            self._query_failed = True
            logger.log(level, "NVML query failed, sample left out: %s", error)
            return None
