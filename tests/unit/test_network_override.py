"""`hardware.networkGbpsPerNode`: a cluster whose network differs from the catalog's
reference system (a cloud node with 4 x 100 Gb/s instead of 8 x 200 Gb/s)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainplan.api import TrainingPlanSpec
from trainplan.planner import Catalog, plan
from trainplan.planner.resolve import resolve

SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 2.0e10},
    "batch": {"globalBatchSize": 512, "microBatchSize": 1},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "parallelism": {"tensor": 1, "pipeline": 1, "zeroStage": 3},
    "objective": {"gpus": 256},
}


def _spec(gpus: int = 256, **hardware: Any) -> TrainingPlanSpec:
    document = {
        **SPEC,
        "hardware": {**SPEC["hardware"], **hardware},
        "objective": {"gpus": gpus},
    }
    return TrainingPlanSpec.model_validate(document)


@pytest.mark.parametrize("bad", [0, -1, 100_001, "fast"])
def test_the_network_is_bounded(bad: Any) -> None:
    with pytest.raises(ValidationError, match="networkGbpsPerNode"):
        _spec(networkGbpsPerNode=bad)


def test_the_node_network_is_shared_by_its_gpus(catalog: Catalog) -> None:
    reference = resolve(_spec(), catalog).workload.gpu
    assert reference.network_bandwidth_bytes_per_second == pytest.approx(25e9)  # 200 Gb/s
    cloud = resolve(_spec(networkGbpsPerNode=400), catalog).workload.gpu
    assert cloud.network_bandwidth_bytes_per_second == pytest.approx(400e9 / 8 / 8)
    four = resolve(_spec(gpus=64, networkGbpsPerNode=400, gpusPerNode=4), catalog)
    assert four.workload.gpu.network_bandwidth_bytes_per_second == pytest.approx(400e9 / 8 / 4)
    # Everything else about the GPU stays the catalog's.
    assert cloud.name == reference.name
    assert cloud.nvlink_bandwidth_bytes_per_second == reference.nvlink_bandwidth_bytes_per_second


def test_a_slower_network_exposes_zero3_gathers_across_nodes(catalog: Catalog) -> None:
    fast = plan(_spec(), catalog)
    slow = plan(_spec(networkGbpsPerNode=400), catalog)
    assert fast.step_breakdown is not None
    assert slow.step_breakdown is not None
    assert slow.step_breakdown.data_comm_seconds > fast.step_breakdown.data_comm_seconds
    assert slow.step_seconds > fast.step_seconds
    assert slow.gpu_hours > fast.gpu_hours
    line = next(line for line in slow.explanation if line.startswith("Network:"))
    assert "400 Gb/s per node (hardware.networkGbpsPerNode), 6.25 GB/s per GPU" in line
    assert not any(line.startswith("Network:") for line in fast.explanation)


def test_inside_one_node_the_network_does_not_matter(catalog: Catalog) -> None:
    one_node = plan(_spec(gpus=8), catalog)
    slow = plan(_spec(gpus=8, networkGbpsPerNode=1), catalog)
    assert slow.step_seconds == pytest.approx(one_node.step_seconds)
