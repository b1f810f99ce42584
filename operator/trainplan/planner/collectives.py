"""Cost of one NCCL collective over a communicator that may span nodes (pure).

Time = latency + bytes / bandwidth (the alpha-beta model), with NCCL's own latency model
(NVIDIA NCCL, `src/graph/tuning.cc`, `ncclTopoTuneModel`, Simple protocol): a ring
collective pays a base latency plus one hop latency per ring step, intra-node hops at the
NVLink (or PCIe) figure and inter-node hops at the network figure. An all-gather or a
reduce-scatter over n ranks on k nodes takes n - 1 steps, k - 1 of them across nodes; an
all-reduce twice that. An all-reduce may instead use NCCL's tree, whose latency grows with
the logarithm of the node count: 2 x ((ranks per node - 1) x intra hop + log2(k) x
inter hop), at 0.9 x the ring's bus bandwidth and half of it as algorithm bandwidth; NCCL
picks the faster of the two for each call, so this module does too.

Bandwidth terms are those of the ring (Patarasuk and Yuan 2009): (n - 1) / n x bytes for
an all-gather or reduce-scatter, twice that for an all-reduce, over the per-GPU bandwidth
the caller gives (`steptime.collective_bandwidth_bytes_per_second`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_TREE_BUS_BANDWIDTH_FRACTION = 0.9  # tuning.cc: a tree's bus bandwidth is 0.9 x the ring's
_TREE_ALGORITHM_RATIO = 0.5  # tuning.cc: a tree's algorithm bandwidth is half its bus one


@dataclass(frozen=True, slots=True)
class Communicator:
    """The shape of one collective group and the achieved rates along its links."""

    ranks: int
    nodes: int
    bandwidth_bytes_per_second: float
    """Achieved per-GPU bandwidth of the group (NVLink inside a node, else the network)."""
    base_latency_seconds: float
    intra_node_hop_seconds: float
    network_hop_seconds: float

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.ranks // max(1, self.nodes))


def _ring_latency_seconds(group: Communicator, steps: int, network_steps: int) -> float:
    return (
        group.base_latency_seconds
        + (steps - network_steps) * group.intra_node_hop_seconds
        + network_steps * group.network_hop_seconds
    )


def all_gather_seconds(size_bytes: float, group: Communicator) -> float:
    """One ring all-gather producing `size_bytes` on every rank (also a reduce-scatter
    consuming `size_bytes`): n - 1 steps of size / n bytes each."""
    n = group.ranks
    if n <= 1:
        return 0.0
    latency = _ring_latency_seconds(group, n - 1, group.nodes - 1)
    return latency + (n - 1) / n * size_bytes / group.bandwidth_bytes_per_second


def reduce_scatter_seconds(size_bytes: float, group: Communicator) -> float:
    """One ring reduce-scatter of `size_bytes`: the same steps and volume as an all-gather."""
    return all_gather_seconds(size_bytes, group)


def ring_all_reduce_seconds(size_bytes: float, group: Communicator) -> float:
    """One ring all-reduce: 2 (n - 1) steps, 2 (n - 1) / n x bytes per rank."""
    n = group.ranks
    if n <= 1:
        return 0.0
    latency = _ring_latency_seconds(group, 2 * (n - 1), 2 * (group.nodes - 1))
    return latency + 2 * (n - 1) / n * size_bytes / group.bandwidth_bytes_per_second


def tree_all_reduce_seconds(size_bytes: float, group: Communicator) -> float:
    """One tree all-reduce (NCCL's double binary tree across nodes, a chain inside each)."""
    if group.ranks <= 1:
        return 0.0
    depth = math.ceil(math.log2(group.nodes)) if group.nodes > 1 else 0
    latency = 2 * (
        (group.ranks_per_node - 1) * group.intra_node_hop_seconds
        + depth * group.network_hop_seconds
    )
    bandwidth = (
        group.bandwidth_bytes_per_second * _TREE_BUS_BANDWIDTH_FRACTION * _TREE_ALGORITHM_RATIO
    )
    return latency + size_bytes / bandwidth


def all_reduce_seconds(size_bytes: float, group: Communicator) -> float:
    """One all-reduce by whichever of ring and tree is faster, as NCCL chooses."""
    if group.ranks <= 1:
        return 0.0
    return min(
        ring_all_reduce_seconds(size_bytes, group), tree_all_reduce_seconds(size_bytes, group)
    )


def point_to_point_seconds(size_bytes: float, group: Communicator) -> float:
    """One send/receive between two ranks (one hop, over the network if they are on two
    nodes)."""
    hop = group.network_hop_seconds if group.nodes > 1 else group.intra_node_hop_seconds
    return group.base_latency_seconds + hop + size_bytes / group.bandwidth_bytes_per_second


def all_to_all_seconds(
    intra_node_bytes: float,
    network_bytes: float,
    group: Communicator,
    network_bytes_per_second: float,
) -> float:
    """One all-to-all in which each rank sends `intra_node_bytes` to peers on its node
    and `network_bytes` to ranks on other nodes (an MoE layer's dispatch or combine).

    The sends are issued at once, as NCCL's grouped point-to-point calls and DeepEP's
    kernels issue them, so one latency (pairwise exchange, Thakur et al. 2005, IJHPCA
    19(1), section 4.5, without its sequential steps); the node's peers are reached over
    NVLink at the group's bandwidth, the others through the rank's own network port at
    `network_bytes_per_second`; both paths carry their share at the same time, so the
    slower one sets the time."""
    if group.ranks <= 1:
        return 0.0
    hop = group.network_hop_seconds if network_bytes > 0 else group.intra_node_hop_seconds
    intra = intra_node_bytes / group.bandwidth_bytes_per_second
    inter = network_bytes / network_bytes_per_second
    return group.base_latency_seconds + hop + max(intra, inter)
