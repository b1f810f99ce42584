"""The packaged hardware and model catalog, its lookups and its parser."""

from __future__ import annotations

import copy
import pickle
import re
from importlib import resources

import pytest

from trainplan.planner.calibration import calibration_from_mapping, calibration_to_mapping
from trainplan.planner.catalog import (
    PRECISIONS,
    Catalog,
    CatalogDataError,
    GPUSpec,
    UnknownGPUError,
    UnknownModelError,
    UnsupportedPrecisionError,
    load_catalog,
    load_catalog_from,
)
from trainplan.planner.shapes import ModelShape, parameter_count

GPU_NAMES = (
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "A100-PCIE-80GB",
    "H100-SXM5-80GB",
    "H100-PCIE-80GB",
    "H800-SXM5-80GB",
    "H200-SXM-141GB",
    "H200-NVL-141GB",
    "B200-SXM-180GB",
    "GB200-NVL72",
    "L40S",
    "V100-SXM2-32GB",
    "P100-16GB",
    "K80",
    "MI300X-OAM-192GB",
)

MODEL_NAMES = (
    "llama-7b",
    "llama-13b",
    "llama-33b",
    "llama-65b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3.1-405b",
    "mistral-7b",
    "qwen2.5-7b",
    "gpt3-175b",
    "bloom-176b",
    "falcon-7b",
    "falcon-40b",
    "falcon-180b",
    "mpt-7b",
    "mpt-30b",
    "pythia-70m",
    "pythia-160m",
    "pythia-410m",
    "pythia-1b",
    "pythia-1.4b",
    "pythia-2.8b",
    "pythia-6.9b",
    "pythia-12b",
    "megatron-1t",
    "tiny",
)
MOE_MODEL_NAMES = (
    "mixtral-8x7b",
    "mixtral-8x22b",
    "dbrx",
    "grok-1",
    "olmoe-1b-7b",
    "qwen1.5-moe-a2.7b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "llama4-scout",
    "llama4-maverick",
    "deepseek-v2-lite",
    "deepseek-v2",
    "deepseek-v3",
)
"""Mixture-of-experts presets (some with declared head widths or latent attention)."""
DECLARED_HEAD_MODEL_NAMES = ("gemma-2-2b", "gemma-2-9b", "gemma-2-27b")
"""Presets whose heads are not hiddenSize / attentionHeads wide."""

GiB = 2**30

MINIMAL_GPU = """
gpus:
  - name: X1
    gfdProduct: NVIDIA-X1
    architecture: ampere
    year: 2020
    memoryBytes: 1024
    peakFlops: {fp32: 1.0e+12}
    hbmBandwidthBytesPerSecond: 1.0e+12
    intraNodeLink: nvlink
    nvlinkBandwidthBytesPerSecond: 1.0e+11
    networkBandwidthBytesPerSecond: 1.0e+10
    tdpWatts: 300
    source: test
"""

CALIBRATION = (resources.files("trainplan.planner") / "data" / "calibration.yaml").read_text()

MINIMAL_MODEL = """
models:
  - name: m1
    parameters: 1.0e+6
    layers: 2
    hiddenSize: 64
    attentionHeads: 4
    kvHeads: 2
    ffnHiddenSize: 256
    gatedMLP: false
    vocabSize: 100
    sequenceLength: 16
    tiedEmbeddings: true
    source: test
"""


def test_packaged_catalog_loads(catalog: Catalog) -> None:
    assert catalog.gpu_names() == GPU_NAMES
    assert catalog.model_names() == MODEL_NAMES + MOE_MODEL_NAMES + DECLARED_HEAD_MODEL_NAMES


@pytest.mark.parametrize("name", DECLARED_HEAD_MODEL_NAMES)
def test_declared_head_widths_count_the_checkpoint(catalog: Catalog, name: str) -> None:
    """Gemma 2's queries are heads x headDim wide, not hiddenSize: the shape's count is
    the released checkpoint's less its two extra norms a layer (under 0.01%)."""
    preset = catalog.model(name)
    shape = preset.shape
    assert shape.attention_width != shape.hidden_size
    missing = 2 * shape.layers * shape.hidden_size  # post-attention and post-MLP norms
    assert parameter_count(shape) + missing == preset.parameters


@pytest.mark.parametrize("name", GPU_NAMES)
def test_every_gpu_found_by_name_in_any_case(catalog: Catalog, name: str) -> None:
    assert catalog.gpu(name).name == name
    assert catalog.gpu(name.lower()).name == name
    assert catalog.gpu(f"  {name.upper()} ").name == name


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("A100-80GB", "A100-SXM4-80GB"),
        ("a100-sxm4-80gb", "A100-SXM4-80GB"),
        ("NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB"),  # GPU Feature Discovery label
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),  # nvidia-smi name
        ("a100-40gb", "A100-SXM4-40GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100-PCIE-80GB"),
        ("h100-sxm", "H100-SXM5-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),
        ("NVIDIA-H200", "H200-SXM-141GB"),
        ("h200-sxm", "H200-SXM-141GB"),
        ("NVIDIA-H100-PCIe", "H100-PCIE-80GB"),
        ("h100_pcie", "H100-PCIE-80GB"),
        ("B200", "B200-SXM-180GB"),
        ("NVIDIA-B200", "B200-SXM-180GB"),
        ("l40s-48gb", "L40S"),
        ("NVIDIA-L40S", "L40S"),
        ("Tesla-V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("v100_32gb", "V100-SXM2-32GB"),
        ("P100-SXM2-16GB", "P100-16GB"),
        ("tesla-k80", "K80"),
    ],
)
def test_gpu_aliases(catalog: Catalog, query: str, expected: str) -> None:
    assert catalog.gpu(query).name == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("LLAMA2-70B", "llama2-70b"),
        ("llama-2-7b", "llama2-7b"),
        ("llama-30b", "llama-33b"),
        ("Llama-3.1-405B", "llama3.1-405b"),
        ("EleutherAI/pythia-6.9b", "pythia-6.9b"),
        ("GPT3", "gpt3-175b"),
    ],
)
def test_model_aliases(catalog: Catalog, query: str, expected: str) -> None:
    assert catalog.model(query).name == expected


def test_unknown_gpu_suggests_the_closest(catalog: Catalog) -> None:
    with pytest.raises(UnknownGPUError) as caught:
        catalog.gpu("A100-80G")
    message = str(caught.value)
    assert message.startswith("unknown gpuType 'A100-80G'; did you mean 'A100-SXM4-80GB'?")
    assert "known: " + ", ".join(GPU_NAMES) in message
    assert caught.value.suggestion == "A100-SXM4-80GB"
    assert isinstance(caught.value, LookupError)


def test_unknown_model_suggests_the_closest(catalog: Catalog) -> None:
    with pytest.raises(UnknownModelError, match=r"did you mean 'llama2-70b'\?") as caught:
        catalog.model("llama2-70")
    assert "unknown model preset 'llama2-70'" in str(caught.value)
    assert "known: llama-7b, " in str(caught.value)
    assert isinstance(caught.value, LookupError)


def test_an_unknown_model_preset_says_what_the_planner_supports(catalog: Catalog) -> None:
    with pytest.raises(UnknownModelError) as caught:
        catalog.model("vit-huge")
    message = str(caught.value)
    assert "known: llama-7b, " in message
    assert "decoder-only transformer language models, dense or mixture-of-experts" in message
    assert "vision and encoder-only models are not supported" in message
    assert str(pickle.loads(pickle.dumps(caught.value))) == message


def test_unknown_name_without_a_close_match(catalog: Catalog) -> None:
    with pytest.raises(UnknownGPUError) as caught:
        catalog.gpu("TPU-v5p")
    assert "did you mean" not in str(caught.value)
    assert caught.value.suggestion is None
    assert str(caught.value).startswith("unknown gpuType 'TPU-v5p'; known: A100-SXM4-40GB")


def test_lookup_errors_survive_pickling(catalog: Catalog) -> None:
    with pytest.raises(UnknownGPUError) as caught:
        catalog.gpu("A100-80G")
    clone = pickle.loads(pickle.dumps(caught.value))
    assert str(clone) == str(caught.value)


def test_preset_parameter_counts_match_the_published_ones(catalog: Catalog) -> None:
    errors = {
        preset.name: parameter_count(preset.shape) / preset.parameters - 1.0
        for preset in catalog.models
    }
    worst = max(errors, key=lambda name: abs(errors[name]))
    print(f"worst parameter-count mismatch: {worst} {errors[worst]:+.2%}")
    outside = {name: f"{error:+.2%}" for name, error in errors.items() if abs(error) > 0.04}
    assert not outside


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_preset_heads_divide(catalog: Catalog, name: str) -> None:
    preset = catalog.model(name)
    assert preset.hidden_size % preset.attention_heads == 0
    assert preset.attention_heads % preset.kv_heads == 0
    assert preset.shape.head_dim * preset.attention_heads == preset.hidden_size


def test_known_exact_counts(catalog: Catalog) -> None:
    """Shapes whose checkpoint counts are known exactly reproduce them to the parameter."""
    assert parameter_count(catalog.model("llama2-7b").shape) == 6_738_415_616
    assert parameter_count(catalog.model("llama2-70b").shape) == 68_976_648_192
    assert parameter_count(catalog.model("llama3-8b").shape) == 8_030_261_248
    assert parameter_count(catalog.model("llama3.1-405b").shape) == 405_853_388_800
    assert parameter_count(catalog.model("mpt-7b").shape) == 6_649_286_656
    assert parameter_count(catalog.model("tiny").shape) == catalog.model("tiny").parameters


@pytest.mark.parametrize("name", ["V100-SXM2-32GB", "P100-16GB", "K80"])
def test_no_bf16_before_ampere(catalog: Catalog, name: str) -> None:
    gpu = catalog.gpu(name)
    assert "bf16" not in gpu.peak_flops
    with pytest.raises(UnsupportedPrecisionError, match="does not support precision 'bf16'"):
        gpu.peak_flops_for("bf16")


def test_fp8_only_from_hopper_and_ada_on(catalog: Catalog) -> None:
    with_fp8 = {gpu.name for gpu in catalog.gpus if "fp8" in gpu.peak_flops}
    recent = {
        gpu.name
        for gpu in catalog.gpus
        if gpu.architecture in {"hopper", "ada", "blackwell", "cdna3"}
    }
    assert with_fp8 == recent
    assert with_fp8 == {
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "H800-SXM5-80GB",
        "H200-SXM-141GB",
        "H200-NVL-141GB",
        "B200-SXM-180GB",
        "MI300X-OAM-192GB",
        "GB200-NVL72",
        "L40S",
    }


def test_unsupported_precision_lists_what_the_gpu_has(catalog: Catalog) -> None:
    with pytest.raises(UnsupportedPrecisionError) as caught:
        catalog.gpu("K80").peak_flops_for("fp16")
    assert str(caught.value) == "K80 does not support precision 'fp16'; it has: fp32"
    assert isinstance(caught.value, ValueError)
    with pytest.raises(UnsupportedPrecisionError, match=r"it has: fp32, tf32, fp16, bf16$"):
        catalog.gpu("A100-SXM4-80GB").peak_flops_for("fp8")


def test_datasheet_figures(catalog: Catalog) -> None:
    a100 = catalog.gpu("A100-SXM4-80GB")
    assert a100.memory_bytes == 80 * GiB == 85_899_345_920
    assert a100.peak_flops_for("bf16") == 312e12
    assert a100.peak_flops_for("BF16") == 312e12
    assert a100.peak_flops_for("tf32") == 156e12
    assert catalog.gpu("A100-SXM4-40GB").memory_bytes == 40 * GiB
    assert catalog.gpu("H200-SXM-141GB").memory_bytes == 141 * GiB
    h100 = catalog.gpu("H100-SXM5-80GB")
    assert h100.peak_flops_for("bf16") == 989.4e12
    assert h100.peak_flops_for("fp8") == 1978.9e12
    assert catalog.gpu("H200-SXM-141GB").peak_flops == h100.peak_flops
    assert catalog.gpu("A100-PCIE-80GB").intra_node_link == "pcie"
    assert catalog.gpu("K80").intra_node_link == "pcie"


def test_every_gpu_is_consistent(catalog: Catalog) -> None:
    for gpu in catalog.gpus:
        assert set(gpu.peak_flops) <= set(PRECISIONS), gpu.name
        assert "fp32" in gpu.peak_flops, gpu.name
        assert gpu.memory_bytes % GiB == 0, gpu.name
        # Tensor-core precisions are never slower than plain FP32.
        assert all(f >= gpu.peak_flops["fp32"] for f in gpu.peak_flops.values()), gpu.name
        assert gpu.network_bandwidth_bytes_per_second <= gpu.nvlink_bandwidth_bytes_per_second
        assert gpu.gfd_product
        assert gpu.source


def test_specs_are_frozen_and_hashable(catalog: Catalog) -> None:
    gpu = catalog.gpu("H100-SXM5-80GB")
    with pytest.raises(AttributeError):
        gpu.memory_bytes = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        gpu.peak_flops["fp64"] = 1.0  # type: ignore[index]
    assert hash(gpu) == hash(copy.deepcopy(gpu))
    assert pickle.loads(pickle.dumps(catalog)) == catalog
    assert len({catalog, load_catalog()}) == 1


def test_gpu_spec_freezes_a_plain_dict() -> None:
    spec = GPUSpec(
        name="X",
        aliases=(),
        gfd_product="X",
        architecture="ampere",
        year=2020,
        memory_bytes=1,
        peak_flops={"bf16": 2.0, "fp32": 1.0},
        hbm_bandwidth_bytes_per_second=1.0,
        intra_node_link="nvlink",
        nvlink_bandwidth_bytes_per_second=1.0,
        network_bandwidth_bytes_per_second=1.0,
        tdp_watts=1.0,
        source="test",
    )
    assert list(spec.peak_flops) == ["fp32", "bf16"]
    assert spec.peak_flops_for("bf16") == 2.0
    hash(spec)


def test_load_catalog_from_minimal_texts() -> None:
    small = load_catalog_from(MINIMAL_GPU, MINIMAL_MODEL, CALIBRATION)
    assert small.gpu("nvidia-x1").name == "X1"
    assert small.model("M1").shape == ModelShape(
        layers=2,
        hidden_size=64,
        attention_heads=4,
        kv_heads=2,
        ffn_hidden_size=256,
        gated_mlp=False,
        vocab_size=100,
        sequence_length=16,
        tied_embeddings=True,
    )


@pytest.mark.parametrize(
    ("gpus_yaml", "models_yaml", "expected"),
    [
        (
            MINIMAL_GPU.replace("{fp32: 1.0e+12}", "{fp32: 1.0e+12, fp64: 1.0e+12}"),
            MINIMAL_MODEL,
            r"invalid GPU catalog: 1 error\(s\)\n  gpus\[0\]\.peakFlops\.fp64\[key\] "
            r"\(entry 'X1'\): Input should be 'fp32', .*; got 'fp64'$",
        ),
        (
            MINIMAL_GPU.replace("memoryBytes: 1024", "memoryBytes: lots"),
            MINIMAL_MODEL,
            r"gpus\[0\]\.memoryBytes \(entry 'X1'\): .*got 'lots'",
        ),
        (
            MINIMAL_GPU.replace("tdpWatts: 300", "tdpWatts: 300\n    tdp: 300"),
            MINIMAL_MODEL,
            r"gpus\[0\]\.tdp \(entry 'X1'\): Extra inputs are not permitted",
        ),
        (
            MINIMAL_GPU.replace("    intraNodeLink: nvlink\n", ""),
            MINIMAL_MODEL,
            r"gpus\[0\]\.intraNodeLink \(entry 'X1'\): Field required",
        ),
        (
            MINIMAL_GPU.replace("intraNodeLink: nvlink", "intraNodeLink: infiniband"),
            MINIMAL_MODEL,
            r"gpus\[0\]\.intraNodeLink .*'nvlink', 'infinity-fabric' or 'pcie'",
        ),
        (
            MINIMAL_GPU,
            MINIMAL_MODEL.replace("hiddenSize: 64", "hidden_size: 64"),
            r"models\[0\]\.hiddenSize \(entry 'm1'\): Field required",
        ),
        (
            MINIMAL_GPU,
            MINIMAL_MODEL.replace("gatedMLP: false", "gatedMLP: maybe"),
            r"models\[0\]\.gatedMLP",
        ),
        (
            MINIMAL_GPU,
            MINIMAL_MODEL.replace("kvHeads: 2", "kvHeads: 3"),
            r"models\[0\] \(entry 'm1'\): Value error, attentionHeads \(4\) must be "
            r"divisible by kvHeads \(3\)",
        ),
        (
            MINIMAL_GPU,
            MINIMAL_MODEL.replace("layers: 2", "layers: 0"),
            r"models\[0\]\.layers .*greater than 0",
        ),
        (
            MINIMAL_GPU,
            MINIMAL_MODEL.replace("models:", "presets:"),
            r"invalid model catalog: 2 error\(s\)\n  models: Field required",
        ),
        (
            "gpus: []",
            MINIMAL_MODEL,
            r"gpus must list at least one GPU",
        ),
        (
            MINIMAL_GPU.replace("year: 2020", "year: 2020\n    year: 2021"),
            MINIMAL_MODEL,
            r"duplicate key 'year' at line \d+",
        ),
        (
            MINIMAL_GPU,
            MINIMAL_MODEL + "  - [unclosed",
            r"invalid model catalog: not YAML",
        ),
    ],
)
def test_malformed_catalog_fails_with_the_field_path(
    gpus_yaml: str, models_yaml: str, expected: str
) -> None:
    with pytest.raises(CatalogDataError, match=expected):
        load_catalog_from(gpus_yaml, models_yaml, CALIBRATION)


def test_duplicate_names_are_rejected() -> None:
    second = MINIMAL_GPU.split("gpus:\n", 1)[1].replace("name: X1", "name: X2")
    with pytest.raises(CatalogDataError, match=re.escape("'nvidia-x1' is used by both")):
        load_catalog_from(MINIMAL_GPU + second, MINIMAL_MODEL, CALIBRATION)
    twice = MINIMAL_MODEL + MINIMAL_MODEL.split("models:\n", 1)[1]
    with pytest.raises(CatalogDataError, match="'m1' is used by both 'm1' and 'm1'"):
        load_catalog_from(MINIMAL_GPU, twice, CALIBRATION)


def test_megatron_gemm_efficiency_is_optional_and_round_trips(catalog: Catalog) -> None:
    calibration = catalog.calibration
    hopper = calibration.architecture("hopper")
    ampere = calibration.architecture("ampere")
    assert hopper.megatron_gemm_efficiency is not None
    assert hopper.gemm_efficiency_for("megatron-core") == hopper.megatron_gemm_efficiency
    assert hopper.gemm_efficiency_for("pytorch") == hopper.gemm_efficiency
    # Without a value of its own, Megatron-Core runs at the PyTorch kernels' efficiency.
    assert ampere.megatron_gemm_efficiency is None
    assert ampere.gemm_efficiency_for("megatron-core") == ampere.gemm_efficiency
    document = calibration_to_mapping(calibration)
    assert "megatron_gemm_efficiency" not in document["architectures"]["ampere"]
    assert calibration_from_mapping(document) == calibration
