"""Layout search: what is generated, what is evaluated, and what is selected."""

import math
from collections import defaultdict
from dataclasses import replace
from itertools import pairwise

import pytest

from trainplan.planner import Catalog
from trainplan.planner.calibration import Calibration
from trainplan.planner.layout import AttentionKernel, Layout, Workload
from trainplan.planner.search import (
    Evaluation,
    Evaluator,
    LayoutPins,
    RunSettings,
    best_at,
    candidate_gpu_counts,
    divisors,
    duration_lower_bound_seconds,
    feasible_sorted,
    generate_layouts,
    rank_key,
    select_fastest,
    select_fewest_gpus_for_deadline,
)
from trainplan.planner.shapes import ModelShape

NO_FAILURES = RunSettings(
    total_steps=1000, interruptions_per_gpu_hour=0.0, checkpoint_seconds=0.0, restart_seconds=0.0
)


def make_workload(
    catalog: Catalog,
    model: str | ModelShape,
    batch: int,
    gpu: str = "A100-SXM4-80GB",
    attention: AttentionKernel = "flash",
) -> Workload:
    shape = catalog.model(model).shape if isinstance(model, str) else model
    return Workload(
        shape=shape,
        gpu=catalog.gpu(gpu),
        gpus_per_node=8,
        global_batch_size=batch,
        precision="bf16",
        optimizer="adamw",
        attention=attention,
    )


GQA_SHAPE = ModelShape(
    layers=8,
    hidden_size=1024,
    attention_heads=16,
    kv_heads=4,
    ffn_hidden_size=2816,
    gated_mlp=True,
    vocab_size=32000,
    sequence_length=4096,
    tied_embeddings=False,
)

# (model, global batch, attention, GPU counts)
GENERATION_CASES = [
    ("pythia-1b", 256, "flash", [1, 8, 16, 64]),
    ("pythia-410m", 96, "standard", [3, 24, 48]),
    (GQA_SHAPE, 64, "flash", [2, 8, 32]),
]


def group_key(layout: Layout) -> Layout:
    """A layout with its micro-batch and accumulation blanked: the shape of the layout."""
    return replace(layout, micro_batch_size=0, accumulation_steps=0)


def assert_legal(workload: Workload, gpus: int, layout: Layout) -> None:
    """The rules every generated layout keeps, pins or not."""
    shape = workload.shape
    t, p, d = layout.tensor, layout.pipeline, layout.data
    assert t * p * d == gpus
    assert workload.global_batch_size % d == 0
    assert layout.micro_batch_size * d * layout.accumulation_steps == workload.global_batch_size
    assert layout.global_batch_size == workload.global_batch_size
    assert shape.attention_heads % t == 0
    assert shape.kv_heads % t == 0 or t % shape.kv_heads == 0
    assert shape.layers % p == 0
    assert layout.virtual_stages >= 1
    if layout.virtual_stages > 1:
        assert p > 1
        assert layout.accumulation_steps % p == 0
    if t == 1:
        assert not layout.sequence_parallel


# ----------------------------------------------------------------- divisors


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, [1]),
        (2, [1, 2]),
        (7, [1, 7]),
        (12, [1, 2, 3, 4, 6, 12]),
        (16, [1, 2, 4, 8, 16]),
        (36, [1, 2, 3, 4, 6, 9, 12, 18, 36]),
        (97, [1, 97]),
    ],
)
def test_divisors(n: int, expected: list[int]) -> None:
    assert divisors(n) == expected


def test_divisors_match_brute_force() -> None:
    for n in range(1, 1025):
        assert divisors(n) == [i for i in range(1, n + 1) if n % i == 0]


# ----------------------------------------------------------------- generation


@pytest.mark.parametrize(("model", "batch", "attention", "gpu_counts"), GENERATION_CASES)
def test_generated_layouts_are_legal(
    catalog: Catalog,
    model: str | ModelShape,
    batch: int,
    attention: AttentionKernel,
    gpu_counts: list[int],
) -> None:
    workload = make_workload(catalog, model, batch, attention=attention)
    shape = workload.shape
    for gpus in gpu_counts:
        layouts = list(generate_layouts(workload, gpus, LayoutPins()))
        assert layouts, f"no layout on {gpus} GPUs"
        assert len(set(layouts)) == len(layouts)
        for layout in layouts:
            assert_legal(workload, gpus, layout)
            # Unpinned: tensor groups stay in one node, chunks split each stage evenly,
            # ZeRO-3 only without pipelining, SP whenever there is tensor parallelism.
            assert workload.gpus_per_node % layout.tensor == 0
            assert shape.layers % (layout.pipeline * layout.virtual_stages) == 0
            assert layout.zero_stage in ((0,) if layout.data == 1 else (0, 1, 2, 3))
            assert layout.zero_stage < 3 or layout.pipeline == 1
            assert layout.sequence_parallel == (layout.tensor > 1)
            assert 1 <= layout.micro_batch_size <= 64
            if attention == "flash":
                assert layout.checkpointing in ("none", "full")


@pytest.mark.parametrize(("model", "batch", "attention", "gpu_counts"), GENERATION_CASES)
def test_micro_batches_come_in_ascending_order(
    catalog: Catalog,
    model: str | ModelShape,
    batch: int,
    attention: AttentionKernel,
    gpu_counts: list[int],
) -> None:
    """`Evaluator.evaluate_all` relies on this order to stop at the first misfit."""
    workload = make_workload(catalog, model, batch, attention=attention)
    for gpus in gpu_counts:
        micro: dict[Layout, list[int]] = defaultdict(list)
        for layout in generate_layouts(workload, gpus, LayoutPins()):
            micro[group_key(layout)].append(layout.micro_batch_size)
        for sizes in micro.values():
            assert sizes == sorted(sizes)


def test_interleaving_needs_a_pipeline_and_whole_rounds(catalog: Catalog) -> None:
    workload = make_workload(catalog, "pythia-410m", 96)
    layouts = list(generate_layouts(workload, 8, LayoutPins(tensor=1)))
    interleaved = [lay for lay in layouts if lay.virtual_stages > 1]
    assert interleaved
    assert all(lay.pipeline > 1 for lay in interleaved)
    assert all(lay.accumulation_steps % lay.pipeline == 0 for lay in interleaved)
    assert all(lay.virtual_stages == 1 for lay in layouts if lay.pipeline == 1)


PIN_CASES = [
    LayoutPins(tensor=2),
    LayoutPins(pipeline=3),
    LayoutPins(data=8),
    LayoutPins(pipeline=2, virtual_stages=3),
    LayoutPins(micro_batch_size=2),
    LayoutPins(zero_stage=1),
    LayoutPins(checkpointing="selective"),
    LayoutPins(sequence_parallel=False),
    LayoutPins(tensor=4, pipeline=2, data=6, micro_batch_size=4, zero_stage=2),
    LayoutPins(tensor=2, checkpointing="full", sequence_parallel=True, zero_stage=0),
]


@pytest.mark.parametrize("pins", PIN_CASES, ids=repr)
def test_every_pin_is_respected(catalog: Catalog, pins: LayoutPins) -> None:
    workload = make_workload(catalog, "pythia-410m", 96, attention="standard")
    layouts = list(generate_layouts(workload, 48, pins))
    assert layouts
    for layout in layouts:
        assert_legal(workload, 48, layout)
        for name in ("tensor", "pipeline", "data", "micro_batch_size", "zero_stage"):
            pinned = getattr(pins, name)
            assert pinned is None or getattr(layout, name) == pinned, name
        assert pins.checkpointing is None or layout.checkpointing == pins.checkpointing
        if pins.virtual_stages is not None and layout.pipeline > 1:
            assert layout.virtual_stages == pins.virtual_stages
        if pins.sequence_parallel is not None and layout.tensor > 1:
            assert layout.sequence_parallel == pins.sequence_parallel


def test_micro_batch_pin_that_does_not_divide_the_rank_batch_yields_nothing(
    catalog: Catalog,
) -> None:
    workload = make_workload(catalog, "pythia-1b", 64)
    assert list(generate_layouts(workload, 8, LayoutPins(data=8, micro_batch_size=3))) == []


def test_pinned_virtual_stages_split_each_stage_evenly(catalog: Catalog) -> None:
    """A pinned chunk count with a searched pipeline degree must still divide L / p.

    The API accepts `virtualPipelineStages` without `pipeline` (it checks layers against
    pipeline x chunks only when pipeline is pinned), so this reaches `plan()`.
    """
    workload = make_workload(catalog, "pythia-1b", 256)  # 16 layers
    layouts = list(generate_layouts(workload, 16, LayoutPins(tensor=1, virtual_stages=2)))
    assert layouts
    uneven = [
        lay.describe()
        for lay in layouts
        if workload.shape.layers % (lay.pipeline * lay.virtual_stages)
    ]
    assert uneven == []


def test_pinned_zero3_is_never_combined_with_pipelining(catalog: Catalog) -> None:
    """ZeRO-3 with pipeline > 1 is excluded when searched and rejected by the API when
    both are pinned; a ZeRO-3 pin with a searched pipeline must not bring it back."""
    workload = make_workload(catalog, "pythia-1b", 256)
    layouts = list(generate_layouts(workload, 16, LayoutPins(zero_stage=3)))
    assert layouts
    assert [lay.describe() for lay in layouts if lay.pipeline > 1] == []


# ----------------------------------------------------------------- GPU counts


@pytest.mark.parametrize(
    ("model", "batch", "pins", "ceiling"),
    [
        ("pythia-1b", 24, LayoutPins(), 128),
        ("pythia-410m", 100, LayoutPins(), 256),
        ("pythia-1b", 256, LayoutPins(tensor=8), 512),
        ("pythia-410m", 96, LayoutPins(pipeline=3), 100),
    ],
)
def test_candidate_gpu_counts_are_reachable_whole_nodes(
    catalog: Catalog, model: str, batch: int, pins: LayoutPins, ceiling: int
) -> None:
    workload = make_workload(catalog, model, batch)
    counts = candidate_gpu_counts(workload, pins, ceiling)
    assert counts == sorted(set(counts))
    assert all(c <= ceiling for c in counts)
    assert all(c <= 8 or c % 8 == 0 for c in counts)
    reachable = {c for c in range(1, ceiling + 1) if list(generate_layouts(workload, c, pins))}
    assert set(counts) == {c for c in reachable if c <= 8 or c % 8 == 0}


def test_partial_nodes_beyond_one_node_are_left_out(catalog: Catalog) -> None:
    workload = make_workload(catalog, "pythia-1b", 24)
    counts = candidate_gpu_counts(workload, LayoutPins(), 128)
    assert 12 not in counts  # TP4 DP3 is legal, but 12 GPUs are one and a half nodes
    assert list(generate_layouts(workload, 12, LayoutPins()))
    assert {1, 2, 3, 4, 6, 8, 24} <= set(counts)


# ----------------------------------------------------------------- evaluation


def test_evaluate_all_stops_after_the_first_misfit(catalog: Catalog) -> None:
    """pythia-1b on one 40 GB GPU: small micro-batches fit, large ones do not."""
    workload = make_workload(catalog, "pythia-1b", 64, gpu="A100-SXM4-40GB")
    evaluator = Evaluator(workload, catalog.calibration, NO_FAILURES)
    layouts = list(generate_layouts(workload, 1, LayoutPins()))
    results = evaluator.evaluate_all(layouts)

    generated: dict[Layout, list[int]] = defaultdict(list)
    for layout in layouts:
        generated[group_key(layout)].append(layout.micro_batch_size)
    evaluated: dict[Layout, list[Evaluation]] = defaultdict(list)
    for result in results:
        evaluated[group_key(result.layout)].append(result)

    truncated = 0
    for key, sizes in generated.items():
        group = evaluated[key]
        seen = [e.layout.micro_batch_size for e in group]
        assert seen == sizes[: len(seen)]  # a prefix of the ascending micro-batches
        assert all(e.memory.fits for e in group[:-1])
        last = group[-1]
        if not last.memory.fits:
            assert last.step is None
            assert last.reliability is None
            assert not last.feasible
            truncated += len(sizes) > len(seen)
        else:
            assert len(seen) == len(sizes)
        for result in group:
            assert result.memory == evaluator.memory(result.layout)
    assert truncated > 0  # the scenario does exercise the early stop


def test_feasible_sorted_orders_by_duration_then_gpus_then_memory(catalog: Catalog) -> None:
    workload = make_workload(catalog, "pythia-1b", 64, gpu="A100-SXM4-40GB")
    evaluator = Evaluator(workload, catalog.calibration, NO_FAILURES)
    evaluations = [e for gpus in (1, 2, 4, 8) for e in best_at(evaluator, gpus, LayoutPins())]
    assert any(not e.feasible for e in evaluations)
    ranked = feasible_sorted(evaluations)
    assert len(ranked) == sum(e.feasible for e in evaluations)
    assert all(e.feasible for e in ranked)
    assert all(rank_key(a) <= rank_key(b) for a, b in pairwise(ranked))
    assert all(
        rank_key(e) == (e.duration_seconds, e.layout.gpus, e.memory.total_bytes) for e in ranked
    )
    assert select_fastest(evaluations) is ranked[0]
    assert select_fastest([e for e in evaluations if not e.feasible]) is None


def test_mfu_of_an_evaluation(catalog: Catalog, calibration: Calibration) -> None:
    workload = make_workload(catalog, "pythia-1b", 64)
    evaluation = Evaluator(workload, calibration, NO_FAILURES).evaluate(
        Layout(1, 1, 8, 8, 1, zero_stage=1)
    )
    assert evaluation.step is not None
    peak = workload.gpu.peak_flops_for("bf16")
    assert evaluation.mfu == pytest.approx(
        evaluation.model_flops_per_step / (8 * peak * evaluation.step.step_seconds)
    )
    assert 0 < evaluation.mfu < 1
    assert evaluation.gpu_hours == pytest.approx(8 * evaluation.duration_seconds / 3600)


# ----------------------------------------------------------------- deadline search


@pytest.mark.parametrize(
    ("model", "batch", "ceiling"),
    [
        ("pythia-1b", 256, 256),
        ("pythia-1b", 24, 128),
        ("pythia-410m", 100, 128),
    ],
)
def test_fewest_gpus_for_deadline_matches_brute_force(
    catalog: Catalog, model: str, batch: int, ceiling: int
) -> None:
    """For each count's best duration as a deadline, the search must return the smallest
    count that meets it, as a scan over every candidate count does."""
    workload = make_workload(catalog, model, batch)
    pins = LayoutPins()
    # The brute force prices every count, far more than one plan may: no bound here.
    evaluator = Evaluator(workload, catalog.calibration, NO_FAILURES, max_evaluations=10**6)
    counts = candidate_gpu_counts(workload, pins, ceiling)
    best: dict[int, float] = {}
    for count in counts:
        choice = select_fastest(best_at(evaluator, count, pins))
        best[count] = math.inf if choice is None else choice.duration_seconds
    deadlines = sorted({d * (1 + 1e-9) for d in best.values() if math.isfinite(d)})
    assert len(deadlines) >= 5

    wrong = []
    for deadline in deadlines:
        brute = next(count for count in counts if best[count] <= deadline)
        choice, _ = select_fewest_gpus_for_deadline(evaluator, counts, pins, deadline)
        got = None if choice is None else choice.layout.gpus
        if got != brute:
            wrong.append((round(deadline, 3), brute, got))
            continue
        assert choice is not None
        assert choice.duration_seconds <= deadline
        assert choice.duration_seconds == pytest.approx(best[brute])
        position = counts.index(brute)
        if position > 0:
            assert best[counts[position - 1]] > deadline  # one count fewer misses it
    assert not wrong, f"(deadline s, brute-force count, returned count): {wrong}"


def test_no_count_meets_an_impossible_deadline(catalog: Catalog) -> None:
    workload = make_workload(catalog, "pythia-1b", 256)
    evaluator = Evaluator(workload, catalog.calibration, NO_FAILURES)
    counts = candidate_gpu_counts(workload, LayoutPins(), 64)
    choice, seen = select_fewest_gpus_for_deadline(evaluator, counts, LayoutPins(), 1.0)
    assert choice is None
    # Only counts whose lower bound could meet the deadline are priced; here none can.
    assert all(duration_lower_bound_seconds(evaluator, count) <= 1.0 for count in seen)
    assert all(duration_lower_bound_seconds(evaluator, count) > 1.0 for count in counts)
    assert select_fewest_gpus_for_deadline(evaluator, [], LayoutPins(), 1e9) == (None, {})
