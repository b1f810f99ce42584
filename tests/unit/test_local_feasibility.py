"""The local feasibility check's arithmetic (`trainplan.local.feasibility`), with injected
memory sizes and core counts, and `/proc/meminfo` parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainplan.api import parse_training_plan_spec
from trainplan.local import LocalPlan, plan_locally
from trainplan.local.feasibility import (
    ABSURD_CPU_SECONDS,
    AGENT_BYTES,
    CPU_FLOPS_PER_SECOND_PER_PROCESS,
    GIB,
    KEPT_CHECKPOINTS,
    PROCESS_RUNTIME_BYTES,
    LocalFeasibility,
    assess_local,
    checkpoint_disk_bytes,
    model_state_bytes,
)
from trainplan.local.machine import mem_available_bytes
from trainplan.planner import Catalog
from trainplan.planner.shapes import parameter_count


def _local(catalog: Catalog, preset: str, nproc: int = 2) -> LocalPlan:
    document: dict[str, Any] = yaml.safe_load(Path("deploy/examples/tiny-local.yaml").read_text())
    document["spec"]["model"] = {"preset": preset}
    return plan_locally(preset, parse_training_plan_spec(document), nproc, catalog)


def _assess(
    catalog: Catalog, local: LocalPlan, available_bytes: int, cores: int = 2
) -> LocalFeasibility:
    return assess_local(
        local.plan,
        local.shape,
        precision=local.spec.training.precision,
        optimizer=local.spec.training.optimizer,
        gpu_overhead_bytes=catalog.calibration.memory_overhead_bytes,
        available_memory_bytes=available_bytes,
        cpu_cores=cores,
    )


def test_tiny_fits_a_small_machine_and_the_gpu_overhead_is_not_counted(catalog: Catalog) -> None:
    local = _local(catalog, "tiny")
    check = _assess(catalog, local, 4 * GIB)
    memory = check.memory
    assert memory.processes == 2
    planned = local.plan.memory.total_bytes - catalog.calibration.memory_overhead_bytes
    assert memory.per_process_bytes == planned + PROCESS_RUNTIME_BYTES
    assert memory.total_bytes == 2 * memory.per_process_bytes + (
        memory.checkpoint_gather_bytes + AGENT_BYTES
    )
    assert memory.total_bytes < 3 * GIB
    assert check.fits
    assert check.problems() == ()
    assert "of 4.0 GiB available" in check.summary()


def test_tiny_is_refused_where_too_little_memory_is_available(catalog: Catalog) -> None:
    check = _assess(catalog, _local(catalog, "tiny"), 1 * GIB)
    assert not check.memory_fits
    assert not check.fits
    (problem,) = check.problems()
    assert problem.startswith("does not fit this machine's memory: about 2.6 GiB needed for 2")
    assert problem.endswith("1.0 GiB available (MemAvailable)")


def test_llama2_7b_is_refused_with_the_numbers(catalog: Catalog) -> None:
    local = _local(catalog, "llama2-7b")
    check = _assess(catalog, local, 64 * GIB)
    assert not check.fits
    memory, time = check.problems()
    assert "needed for 2 processes, 64.0 GiB available" in memory
    assert check.memory.total_bytes > 100 * GIB
    # fp32 AdamW: 4 bytes of weights and 8 of moments per parameter, gathered to rank 0.
    assert check.memory.checkpoint_gather_bytes == pytest.approx(
        12 * parameter_count(local.shape), rel=1e-9
    )
    assert time.startswith("would take about ")
    assert "days on 2 CPU cores" in time
    assert check.cpu_time_absurd


def test_cpu_time_is_the_plans_flops_at_the_stated_rate_on_the_cores_there_are(
    catalog: Catalog,
) -> None:
    local = _local(catalog, "tiny", nproc=4)
    flops = local.plan.flops_per_step * local.plan.total_steps
    two_cores = _assess(catalog, local, 64 * GIB, cores=2)
    eight_cores = _assess(catalog, local, 64 * GIB, cores=8)
    assert two_cores.cpu_seconds == pytest.approx(flops / (2 * CPU_FLOPS_PER_SECOND_PER_PROCESS))
    assert eight_cores.cpu_seconds == pytest.approx(flops / (4 * CPU_FLOPS_PER_SECOND_PER_PROCESS))
    assert two_cores.cpu_seconds < ABSURD_CPU_SECONDS
    assert "GFLOP/s per process" in two_cores.summary()


def test_checkpoint_disk_counts_the_kept_checkpoints_and_the_one_being_written(
    catalog: Catalog,
) -> None:
    local = _local(catalog, "tiny")
    each = model_state_bytes(local.shape, "fp32", "adamw")
    assert each == pytest.approx(12 * parameter_count(local.shape), abs=1)
    assert checkpoint_disk_bytes(each, 7) == (KEPT_CHECKPOINTS + 1) * each + 7


def test_mem_available_is_read_in_bytes(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:    1048576 kB\n")
    assert mem_available_bytes(meminfo) == GIB
    meminfo.write_text("MemTotal:       32000000 kB\n")
    assert mem_available_bytes(meminfo) is None
    assert mem_available_bytes(tmp_path / "absent") is None
