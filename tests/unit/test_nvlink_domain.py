"""An NVLink domain larger than a node (GB200 NVL72: 72 GPUs over 18 trays of 4): groups
inside it use NVLink across nodes (pure planner)."""

from __future__ import annotations

from dataclasses import replace

from trainplan.planner import Catalog
from trainplan.planner.explain import describe_layout
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.search import LayoutPins, tensor_degrees
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import (
    data_comm_seconds,
    pipeline_transfer_seconds,
    tensor_comm_seconds_per_layer_pass,
)

SHAPE = ModelShape(80, 8192, 64, 8, 28672, True, 128256, 8192, False)
LAYOUT = Layout(tensor=8, pipeline=1, data=9, micro_batch_size=1, accumulation_steps=1)


def workloads(catalog: Catalog) -> tuple[Workload, Workload]:
    """The same 4-GPU trays without and with a 72-GPU NVLink domain."""
    tray = replace(catalog.gpu("B200-SXM-180GB"), nvlink_domain_gpus=None)
    alone = Workload(shape=SHAPE, gpu=tray, gpus_per_node=4, global_batch_size=9)
    rack = replace(alone, gpu=replace(tray, nvlink_domain_gpus=72))
    return alone, rack


def test_tensor_degrees_reach_across_the_domain(catalog: Catalog) -> None:
    alone, rack = workloads(catalog)
    pins = LayoutPins()
    assert max(tensor_degrees(alone, pins)) == 4
    # Divisors of 72 that split 64 heads and 8 kv heads: 8 is the largest.
    assert tensor_degrees(rack, pins) == [1, 2, 4, 8]
    assert alone.nvlink_domain_gpus == 4
    assert rack.nvlink_domain_gpus == 72


def test_collectives_inside_the_domain_use_nvlink(catalog: Catalog) -> None:
    alone, rack = workloads(catalog)
    calibration = catalog.calibration
    across_nodes = tensor_comm_seconds_per_layer_pass(alone, LAYOUT, calibration)
    in_domain = tensor_comm_seconds_per_layer_pass(rack, LAYOUT, calibration)
    # NVLink 5 (900 GB/s a direction) against one 400 Gb/s port a GPU: many times faster.
    assert in_domain < across_nodes / 5
    assert data_comm_seconds(rack, LAYOUT, calibration, 1.0) <= data_comm_seconds(
        alone, LAYOUT, calibration, 1.0
    )
    assert "over NVLink across nodes (a 72-GPU NVLink domain)" in describe_layout(LAYOUT, rack)
    assert "8-way tensor parallelism across nodes" in describe_layout(LAYOUT, alone)


def test_bridged_cards_use_pcie_between_their_bridge_groups(catalog: Catalog) -> None:
    """H200 NVL: 4 cards a bridge, 8 a node. Tensor groups of 4 stay on the bridge;
    groups of 8 cross PCIe, 64 GB/s a direction against the bridge's 450."""
    nvl = Workload(
        shape=SHAPE, gpu=catalog.gpu("H200-NVL-141GB"), gpus_per_node=8, global_batch_size=8
    )
    calibration = catalog.calibration
    four = replace(LAYOUT, tensor=4, data=2)
    eight = replace(LAYOUT, tensor=8, data=1)
    assert tensor_comm_seconds_per_layer_pass(nvl, eight, calibration) > 3 * (
        tensor_comm_seconds_per_layer_pass(nvl, four, calibration)
    )
    assert "over PCIe between its 4-GPU NVLink bridge groups" in describe_layout(eight, nvl)
    assert "over NVLink inside a node" in describe_layout(four, nvl)


def test_bridged_cards_send_between_bridge_groups_over_pcie(catalog: Catalog) -> None:
    """Pipeline neighbours on an H200 NVL node: 3 ranks apart they share a bridge, 5 ranks
    apart they cross PCIe (7x less bandwidth), 9 apart the network."""
    nvl = Workload(
        shape=SHAPE, gpu=catalog.gpu("H200-NVL-141GB"), gpus_per_node=8, global_batch_size=8
    )
    calibration = catalog.calibration

    def transfer(tensor: int, data: int) -> float:
        layout = replace(LAYOUT, tensor=tensor, data=data, pipeline=2)
        return pipeline_transfer_seconds(nvl, layout, calibration) * tensor  # same bytes

    bridge, pcie, network = transfer(1, 2), transfer(2, 2), transfer(4, 2)
    assert bridge < pcie < network
