"""benchmarks.trainer_profile's kinds and summary, and benchmarks.reference_gpu_compare's
planner terms by kind (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import reference_gpu
from benchmarks.reference_gpu import GPU_SHAPES, Shape
from benchmarks.reference_gpu_compare import (
    KIND_GROUPS,
    measured_kinds,
    planned_kinds,
    workload_and_layout,
)
from benchmarks.trainer_profile import KINDS, OTHER, KernelTime, kind_of, summarize
from trainplan.planner.catalog import Catalog
from trainplan.planner.steptime import step_time


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        # Kernel names as the H100 and H200 profiles recorded them (cut short).
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matrix multiplies"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matrix multiplies"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", "attention"),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float",
            "softmax and cross-entropy",
        ),
        (
            "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d",
            "softmax and cross-entropy",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float",
            "layer norms",
        ),
        ("void at::native::embedding_backward_feature_kernel<float", "embedding"),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::",
            "optimizer (multi-tensor)",
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda",
            "copies and casts",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel",
            "copies and casts",
        ),
        ("Memcpy HtoD (Pageable -> Device)", "copies and casts"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "collectives"),
        # An elementwise kernel that does not cast is no cast.
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::"
            "native::BinaryFunctor<float, float, float",
            OTHER,
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>",
            OTHER,
        ),
        # CPU operators, as the profile names them without a GPU.
        ("aten::mm", "matrix multiplies"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("aten::_log_softmax", "softmax and cross-entropy"),
        ("aten::mul", OTHER),
    ],
)
def test_kernels_are_told_apart_by_name(name: str, kind: str) -> None:
    assert kind_of(name) == kind


def test_a_summary_is_per_step_and_lists_the_longest_first() -> None:
    kernels = [
        KernelTime("nvjet_gemm_a", 0.6, 30),
        KernelTime("cunn_SoftMaxForward", 0.2, 5),
        KernelTime("CUDAFunctor_add<float>" + "x" * 500, 0.1, 50),
        KernelTime("ncclDevKernel_AllReduce", 0.0, 5),  # no time: left out
    ]
    summary = summarize(kernels, steps=5)
    assert summary["steps"] == 5
    assert summary["kernel_seconds_per_step"] == pytest.approx(0.18)
    assert summary["kinds"] == {
        "matrix multiplies": {"seconds_per_step": pytest.approx(0.12), "calls_per_step": 6.0},
        "softmax and cross-entropy": {
            "seconds_per_step": pytest.approx(0.04),
            "calls_per_step": 1.0,
        },
        OTHER: {"seconds_per_step": pytest.approx(0.02), "calls_per_step": 10.0},
    }
    longest = summary["longest"]
    assert [entry["kind"] for entry in longest] == [
        "matrix multiplies",
        "softmax and cross-entropy",
        OTHER,
    ]
    assert len(longest[2]["name"]) == 160
    with pytest.raises(ValueError, match="at least one"):
        summarize(kernels, steps=0)


def test_every_profiled_kind_is_in_exactly_one_planner_term() -> None:
    members = [kind for group in KIND_GROUPS.values() for kind in group]
    assert sorted(members) == sorted([*(kind for kind, _ in KINDS), OTHER])
    profile = {
        "kinds": {kind: {"seconds_per_step": 1.0, "calls_per_step": 1.0} for kind in members}
    }
    grouped = measured_kinds(profile)
    assert sum(grouped.values()) == len(members)
    assert grouped["norms, casts and other elementwise"] == 4.0


SELECTIVE = replace(GPU_SHAPES[3], name="gpt-1.3b-selective", activation_checkpointing="selective")


@pytest.mark.parametrize("shape", [*GPU_SHAPES, SELECTIVE], ids=lambda shape: shape.name)
@pytest.mark.parametrize("gpu_name", ["H100-SXM5-80GB", "A100-SXM4-80GB"])
def test_the_planner_terms_add_up_to_its_step(
    shape: Shape, gpu_name: str, catalog: Catalog
) -> None:
    workload, layout = workload_and_layout(shape.identity(), catalog.gpu(gpu_name))
    kinds = planned_kinds(workload, layout, catalog.calibration)
    assert all(seconds >= 0.0 for seconds in kinds.values())
    assert kinds["matrix multiplies"] > 0.0
    assert kinds["attention core"] > 0.0
    step = step_time(workload, layout, catalog.calibration).step_seconds
    assert sum(kinds.values()) == pytest.approx(step, rel=1e-9)


def test_kinds_are_planned_for_one_gpu_only(catalog: Catalog) -> None:
    shape = GPU_SHAPES[0]
    layout = {**shape.layout(), "data_parallel": 2, "global_batch_size": 32}
    record = {**shape.identity(), "layout": layout}
    workload, split = workload_and_layout(record, catalog.gpu("H100-SXM5-80GB"))
    with pytest.raises(ValueError, match="one GPU"):
        planned_kinds(workload, split, catalog.calibration)


def test_profiling_needs_steps_after_the_warm_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        reference_gpu.main(
            ["--tiny", "--profile", "--steps", "7", "--output", str(tmp_path / "out")]
        )
        == 2
    )
    assert "--profile needs more steps" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
