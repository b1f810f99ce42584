"""Properties of the layout search over a small family of GPT / LLaMA-like models."""

from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from trainplan.planner import load_catalog
from trainplan.planner.layout import CHECKPOINTING_LEVELS, Layout, Workload
from trainplan.planner.memory import estimate_memory
from trainplan.planner.search import (
    Evaluator,
    LayoutPins,
    RunSettings,
    best_at,
    divisors,
    generate_layouts,
    select_fastest,
    tensor_degrees,
)
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import step_time

CATALOG = load_catalog()
CALIBRATION = CATALOG.calibration
GPU_NAMES = ("A100-SXM4-80GB", "H100-SXM5-80GB", "A100-SXM4-40GB")
GPU_COUNTS = (8, 16, 32, 64)
RUN = RunSettings(
    total_steps=1000, interruptions_per_gpu_hour=0.0, checkpoint_seconds=0.0, restart_seconds=0.0
)
PROPERTY_SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def shapes(draw: st.DrawFn) -> ModelShape:
    heads = draw(st.sampled_from((8, 16, 32)))
    hidden = heads * draw(st.sampled_from((64, 128)))
    gated = draw(st.booleans())
    # SwiGLU models keep about 8h/3 inner width (rounded up to 64) for 4h-MLP parity.
    ffn = -(-8 * hidden // 3 // 64) * 64 if gated else 4 * hidden
    return ModelShape(
        layers=draw(st.sampled_from((4, 8, 12, 16, 24, 32))),
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=draw(st.sampled_from(divisors(heads))),
        ffn_hidden_size=ffn,
        gated_mlp=gated,
        vocab_size=draw(st.sampled_from((32000, 50304))),
        sequence_length=draw(st.sampled_from((1024, 2048, 4096))),
        tied_embeddings=False,
    )


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    return Workload(
        shape=draw(shapes()),
        gpu=CATALOG.gpu(draw(st.sampled_from(GPU_NAMES))),
        gpus_per_node=8,
        global_batch_size=draw(st.sampled_from((32, 64, 128, 256, 512))),
        precision="bf16",
        optimizer="adamw",
        attention=draw(st.sampled_from(("flash", "standard"))),
    )


@dataclass(frozen=True)
class Case:
    workload: Workload
    gpus: int
    pins: LayoutPins


@st.composite
def pins_for(draw: st.DrawFn, workload: Workload) -> LayoutPins:
    """Pins a user could write for `workload` (each degree legal for the model alone)."""

    shape = workload.shape
    return LayoutPins(
        tensor=draw(st.none() | st.sampled_from(tensor_degrees(workload, LayoutPins()))),
        pipeline=draw(st.none() | st.sampled_from(divisors(shape.layers))),
        zero_stage=draw(st.none() | st.integers(0, 3)),
        checkpointing=draw(st.none() | st.sampled_from(CHECKPOINTING_LEVELS)),
        micro_batch_size=draw(st.none() | st.sampled_from((1, 2, 4, 8))),
    )


@st.composite
def cases(draw: st.DrawFn, *, pinned: bool) -> Case:
    workload = draw(workloads())
    pins = draw(pins_for(workload)) if pinned else LayoutPins()
    return Case(workload, draw(st.sampled_from(GPU_COUNTS)), pins)


def assert_pins_respected(layout: Layout, pins: LayoutPins) -> None:
    assert pins.tensor is None or layout.tensor == pins.tensor
    assert pins.pipeline is None or layout.pipeline == pins.pipeline
    assert pins.zero_stage is None or layout.zero_stage == pins.zero_stage
    assert pins.checkpointing is None or layout.checkpointing == pins.checkpointing
    assert pins.micro_batch_size is None or layout.micro_batch_size == pins.micro_batch_size


@PROPERTY_SETTINGS
@given(cases(pinned=False))
def test_generated_layouts_use_every_gpu_and_the_whole_batch(case: Case) -> None:
    """(a) t x p x d == GPUs and b x d x m == the global batch, for every layout."""
    batch = case.workload.global_batch_size
    for layout in generate_layouts(case.workload, case.gpus, case.pins):
        assert layout.tensor * layout.pipeline * layout.data == case.gpus
        assert layout.micro_batch_size * layout.data * layout.accumulation_steps == batch


@PROPERTY_SETTINGS
@given(cases(pinned=False))
def test_fastest_choice_fits_in_memory(case: Case) -> None:
    """(b) The layout `select_fastest` picks fits on the GPU."""
    evaluator = Evaluator(case.workload, CALIBRATION, RUN)
    evaluations = best_at(evaluator, case.gpus, case.pins)
    choice = select_fastest(evaluations)
    event("no feasible layout" if choice is None else "a feasible layout")
    if choice is None:
        assert not any(e.feasible for e in evaluations)
        return
    assert choice.memory.total_bytes <= case.workload.gpu.memory_bytes
    assert choice.memory.total_bytes <= choice.memory.capacity_bytes
    assert choice.duration_seconds == min(e.duration_seconds for e in evaluations)


@PROPERTY_SETTINGS
@given(cases(pinned=False), st.data())
def test_larger_micro_batch_never_needs_less_memory(case: Case, data: st.DataObject) -> None:
    """(c) Raising only the micro-batch (fewer accumulation steps, same global batch) never
    lowers the memory estimate."""
    layouts = list(generate_layouts(case.workload, case.gpus, case.pins))
    if not layouts:
        return
    layout = data.draw(st.sampled_from(layouts), label="layout")
    per_rank = layout.micro_batch_size * layout.accumulation_steps
    previous = estimate_memory(case.workload, layout, CALIBRATION).total_bytes
    for micro in divisors(per_rank):
        if micro <= layout.micro_batch_size:
            continue
        larger = Layout(
            tensor=layout.tensor,
            pipeline=layout.pipeline,
            data=layout.data,
            micro_batch_size=micro,
            accumulation_steps=per_rank // micro,
            zero_stage=layout.zero_stage,
            checkpointing=layout.checkpointing,
            sequence_parallel=layout.sequence_parallel,
            virtual_stages=layout.virtual_stages,
        )
        total = estimate_memory(case.workload, larger, CALIBRATION).total_bytes
        assert total >= previous, (layout.describe(), larger.describe())
        previous = total


@PROPERTY_SETTINGS
@given(cases(pinned=True))
def test_pins_are_respected_by_generation_and_choice(case: Case) -> None:
    """(d) Random tensor / pipeline / ZeRO / recompute / micro-batch pins hold for every
    generated layout and for the chosen one."""
    layouts = list(generate_layouts(case.workload, case.gpus, case.pins))
    event("no legal layout" if not layouts else "some legal layouts")
    for layout in layouts:
        assert_pins_respected(layout, case.pins)
    evaluator = Evaluator(case.workload, CALIBRATION, RUN)
    choice = select_fastest(evaluator.evaluate_all(layouts))
    if choice is not None:
        assert_pins_respected(choice.layout, case.pins)
        assert choice.layout in layouts


@st.composite
def data_doublings(draw: st.DrawFn) -> tuple[Workload, Layout, Layout]:
    """A workload and two layouts that differ only in d versus 2d data-parallel ranks."""
    workload = draw(workloads())
    shape = workload.shape
    tensor = draw(st.sampled_from(tensor_degrees(workload, LayoutPins())))
    pipeline = draw(st.sampled_from(divisors(shape.layers)))
    micro = draw(st.sampled_from((1, 2, 4)))
    per_micro = workload.global_batch_size // micro
    data = draw(st.sampled_from([d for d in divisors(per_micro) if per_micro % (2 * d) == 0]))
    zero = draw(st.integers(0, 2))
    checkpointing = draw(st.sampled_from(CHECKPOINTING_LEVELS))

    def layout(d: int) -> Layout:
        return Layout(
            tensor=tensor,
            pipeline=pipeline,
            data=d,
            micro_batch_size=micro,
            accumulation_steps=per_micro // d,
            zero_stage=zero,
            checkpointing=checkpointing,
            sequence_parallel=tensor > 1,
        )

    return workload, layout(data), layout(2 * data)


@PROPERTY_SETTINGS
@given(data_doublings())
def test_more_data_parallel_gpus_never_raise_compute_per_token(
    doubling: tuple[Workload, Layout, Layout],
) -> None:
    """(e) Doubling the data-parallel degree at a fixed layout shape does not raise the
    per-GPU compute time per token of the global batch."""
    workload, fewer, more = doubling
    tokens = workload.tokens_per_step
    before = step_time(workload, fewer, CALIBRATION).compute_seconds / tokens
    after = step_time(workload, more, CALIBRATION).compute_seconds / tokens
    assert after <= before
