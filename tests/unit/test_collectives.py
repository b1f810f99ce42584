"""Collective costs at scale: NCCL's latency model, ring and tree, buckets and ZeRO-3 units."""

import math

import pytest

from tests.builders import make_layout
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import GPUSpec
from trainplan.planner.collectives import (
    Communicator,
    all_gather_seconds,
    all_reduce_seconds,
    point_to_point_seconds,
    reduce_scatter_seconds,
    ring_all_reduce_seconds,
    tree_all_reduce_seconds,
)
from trainplan.planner.layout import Workload
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import (
    communicator,
    data_comm_seconds,
    gradient_buckets,
    step_time,
)

BASE, NVLINK, NET = 8.4e-6, 3.4e-6, 9.6e-6  # NCCL tuning.cc, Ring/Simple


def group(ranks: int, nodes: int, bandwidth: float = 1e11) -> Communicator:
    return Communicator(
        ranks=ranks,
        nodes=nodes,
        bandwidth_bytes_per_second=bandwidth,
        base_latency_seconds=BASE,
        intra_node_hop_seconds=NVLINK,
        network_hop_seconds=NET,
    )


@pytest.mark.parametrize(("ranks", "nodes"), [(2, 1), (8, 1), (16, 2), (768, 96), (2048, 256)])
@pytest.mark.parametrize("size", [1.0, 4e8])
def test_all_gather_is_n_minus_1_steps_with_nccl_hop_latencies(
    ranks: int, nodes: int, size: float
) -> None:
    # n - 1 ring steps, k - 1 of them between nodes; (n - 1) / n x bytes per rank.
    latency = BASE + (ranks - 1 - (nodes - 1)) * NVLINK + (nodes - 1) * NET
    expected = latency + (ranks - 1) / ranks * size / 1e11
    assert all_gather_seconds(size, group(ranks, nodes)) == pytest.approx(expected)
    assert reduce_scatter_seconds(size, group(ranks, nodes)) == pytest.approx(expected)


@pytest.mark.parametrize(("ranks", "nodes"), [(8, 1), (64, 8), (2048, 256)])
def test_ring_all_reduce_takes_twice_the_steps_and_volume(ranks: int, nodes: int) -> None:
    latency = BASE + 2 * (ranks - nodes) * NVLINK + 2 * (nodes - 1) * NET
    expected = latency + 2 * (ranks - 1) / ranks * 1e9 / 1e11
    assert ring_all_reduce_seconds(1e9, group(ranks, nodes)) == pytest.approx(expected)


def test_tree_latency_grows_with_the_log_of_the_nodes() -> None:
    small = tree_all_reduce_seconds(1.0, group(16, 2))
    large = tree_all_reduce_seconds(1.0, group(2048, 256))
    assert small == pytest.approx(2 * (7 * NVLINK + 1 * NET) + 1.0 / (1e11 * 0.45))
    assert large == pytest.approx(2 * (7 * NVLINK + 8 * NET) + 1.0 / (1e11 * 0.45))
    # The ring's latency grows with the ranks: at 2,048 ranks it is ~40x the tree's.
    assert ring_all_reduce_seconds(1.0, group(2048, 256)) > 30 * large


@pytest.mark.parametrize(("ranks", "nodes"), [(8, 1), (64, 8), (2048, 256)])
@pytest.mark.parametrize("size", [1e3, 1e6, 1e8, 1e10])
def test_all_reduce_takes_the_faster_of_ring_and_tree(ranks: int, nodes: int, size: float) -> None:
    g = group(ranks, nodes)
    assert all_reduce_seconds(size, g) == min(
        ring_all_reduce_seconds(size, g), tree_all_reduce_seconds(size, g)
    )


def test_large_messages_in_one_node_ride_the_ring_small_ones_at_scale_the_tree() -> None:
    one_node = group(8, 1)
    assert all_reduce_seconds(1e10, one_node) == ring_all_reduce_seconds(1e10, one_node)
    wide = group(2048, 256)
    assert all_reduce_seconds(1e6, wide) == tree_all_reduce_seconds(1e6, wide)


def test_one_rank_is_free_and_point_to_point_is_one_hop() -> None:
    alone = group(1, 1)
    for cost in (all_gather_seconds, reduce_scatter_seconds, all_reduce_seconds):
        assert cost(1e9, alone) == 0.0
    assert point_to_point_seconds(1e6, group(2, 1)) == pytest.approx(BASE + NVLINK + 1e-5)
    assert point_to_point_seconds(1e6, group(2, 2)) == pytest.approx(BASE + NET + 1e-5)


def test_the_calibration_carries_nccls_published_latencies(calibration: Calibration) -> None:
    assert calibration.collective_base_latency_seconds == BASE
    assert calibration.nvlink_hop_latency_seconds == NVLINK
    assert calibration.pcie_hop_latency_seconds == 5.7e-6
    assert calibration.network_hop_latency_seconds == NET


# ----------------------------------------------------------------- data parallelism


def workload(gpu: GPUSpec, batch: int) -> Workload:
    shape = ModelShape(
        layers=40,
        hidden_size=5120,
        attention_heads=40,
        kv_heads=40,
        ffn_hidden_size=20480,
        gated_mlp=False,
        vocab_size=50304,
        sequence_length=2048,
        tied_embeddings=True,
    )
    return Workload(
        shape=shape,
        gpu=gpu,
        gpus_per_node=8,
        global_batch_size=batch,
        precision="bf16",
        optimizer="adamw",
        attention="flash",
    )


@pytest.mark.parametrize(("data", "bucket"), [(8, 40e6), (40, 40e6), (64, 64e6), (2048, 2048e6)])
def test_gradient_buckets_follow_megatrons_default(
    calibration: Calibration, data: int, bucket: float
) -> None:
    lay = make_layout(data=data)
    assert gradient_buckets(lay, 13e9, calibration) == math.ceil(13e9 / bucket)
    assert gradient_buckets(lay, 1.0, calibration) == 1


def test_zero3_pays_three_collectives_per_layer_and_micro_batch(
    a100: GPUSpec, calibration: Calibration
) -> None:
    # With nothing to hide behind, ZeRO-3's cost per micro-batch is (layers + 1) units of
    # two all-gathers and one reduce-scatter, each paying its own ring latency.
    work = workload(a100, 768)
    lay = make_layout(data=768, micro=1, accumulation=1, zero=3)
    group_ = communicator(work, 768, 8, calibration)
    assert group_.nodes == 96
    exposed = data_comm_seconds(work, lay, calibration, backward_seconds_per_micro_batch=0.0)
    latency_only = 41 * 3 * all_gather_seconds(0.0, group_)
    assert exposed > latency_only > 0.3  # ~3.2 ms per collective over 96 nodes


def test_zero3_exposed_time_grows_as_the_batch_per_gpu_shrinks(
    a100: GPUSpec, calibration: Calibration
) -> None:
    # The same 1,536 sequences per step on more GPUs: the gathers per GPU do not shrink
    # while the compute that hides them does.
    work = workload(a100, 1536)
    steps = {
        gpus: step_time(
            work,
            make_layout(data=gpus, micro=1, accumulation=1536 // gpus, zero=3),
            calibration,
        )
        for gpus in (384, 768, 1536)
    }
    exposed_share = {
        gpus: step.data_comm_seconds / step.step_seconds for gpus, step in steps.items()
    }
    assert exposed_share[384] < exposed_share[768] < exposed_share[1536]
    assert exposed_share[1536] > 0.2
