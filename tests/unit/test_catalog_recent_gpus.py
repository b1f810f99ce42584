"""The GPUs added to the catalog after the first eleven: H100 PCIe, B200 and L40S (issue 17,
item 5), then H800 SXM5, H200 NVL and the GB200 NVL72's GPU.

Each loads with its datasheet figures (dense peaks: half the sparse ones), a small plan is
feasible on it, and `trainplan plan` accepts it by an alias. Blackwell and Ada Lovelace have
no constants of their own in `calibration.yaml`, so they are planned with `default`.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from click.testing import CliRunner

from trainplan.api import TrainingPlanSpec
from trainplan.cli.main import main
from trainplan.planner import Catalog, plan

GiB = 2**30
GB_PER_S = 1e9
GBIT_PER_S = 1e9 / 8

# name, an alias, its GPU Feature Discovery label, architecture
RECENT = [
    ("H100-PCIE-80GB", "h100-pcie", "NVIDIA-H100-PCIe", "hopper"),
    ("B200-SXM-180GB", "B200", "NVIDIA-B200", "blackwell"),
    ("L40S", "l40s-48gb", "NVIDIA-L40S", "ada"),
    ("H800-SXM5-80GB", "H800", "NVIDIA-H800", "hopper"),
    ("H200-NVL-141GB", "h200nvl", "NVIDIA-H200-NVL", "hopper"),
    ("GB200-NVL72", "GB200", "NVIDIA-GB200", "blackwell"),
]
IDS = [name for name, *_ in RECENT]


class Sheet(NamedTuple):
    """A GPU's published figures, in the units its datasheet prints them."""

    memory_gib: int
    sparse_tflops: dict[str, float]
    """TF32, BF16/FP16 and FP8 tensor peaks with 2:4 sparsity; the catalog holds half."""
    fp32_tflops: float
    memory_tb_per_s: float
    link: str
    link_gb_per_s_both_ways: float
    network_gbit_per_s: float
    tdp_watts: float


SHEETS = {
    # H100 SXM5 compute (no H800 datasheet), NVLink cut to 400 GB/s (DeepSeek, ISCA 2025),
    # one 400 Gb/s InfiniBand port per GPU (DeepSeek-V3 report: IB 50 GB/s).
    "H800-SXM5-80GB": Sheet(
        memory_gib=80,
        sparse_tflops={"tf32": 989, "bf16": 1979, "fp16": 1979, "fp8": 3958},
        fp32_tflops=67,
        memory_tb_per_s=3.35,
        link="nvlink",
        link_gb_per_s_both_ways=400,
        network_gbit_per_s=400,
        tdp_watts=700,
    ),
    # H200 NVL column: TF32 835, BF16/FP16 1,671, FP8 3,341 sparse; 2- or 4-way NVLink
    # bridge at 900 GB/s per GPU; up to 600 W.
    "H200-NVL-141GB": Sheet(
        memory_gib=141,
        sparse_tflops={"tf32": 835, "bf16": 1671, "fp16": 1671, "fp8": 3341},
        fp32_tflops=60,
        memory_tb_per_s=4.8,
        link="nvlink",
        link_gb_per_s_both_ways=900,
        network_gbit_per_s=400,
        tdp_watts=600,
    ),
    # GB200 NVL72 per GPU (rack / 72): TF32 2.5, BF16/FP16 5, FP8 10 PFLOPS sparse; 186 GB
    # at 8 TB/s; NVLink 5 1.8 TB/s; up to 1,200 W.
    "GB200-NVL72": Sheet(
        memory_gib=186,
        sparse_tflops={"tf32": 2500, "bf16": 5000, "fp16": 5000, "fp8": 10000},
        fp32_tflops=80,
        memory_tb_per_s=8.0,
        link="nvlink",
        link_gb_per_s_both_ways=1800,
        network_gbit_per_s=400,
        tdp_watts=1200,
    ),
}


def small_spec(gpu_type: str) -> dict[str, object]:
    """The tiny preset on one node of 8 GPUs: quick to plan on any of them."""
    return {
        "model": {"preset": "tiny"},
        "data": {"tokens": 1.0e8},
        "batch": {"globalBatchSize": 64},
        "hardware": {"gpuType": gpu_type, "gpusPerNode": 8},
        "objective": {"gpus": 8},
        "training": {"precision": "bf16"},
    }


@pytest.mark.parametrize(("name", "alias", "gfd", "architecture"), RECENT, ids=IDS)
def test_each_recent_gpu_loads_and_answers_to_its_names(
    catalog: Catalog, name: str, alias: str, gfd: str, architecture: str
) -> None:
    gpu = catalog.gpu(alias)
    assert gpu.name == name
    assert catalog.gpu(gfd) is gpu
    assert gpu.gfd_product == gfd
    assert gpu.architecture == architecture
    assert gpu.precisions == ("fp32", "tf32", "fp16", "bf16", "fp8")
    assert "https://www.nvidia.com/" in gpu.source  # the vendor page it cites


def test_h100_pcie_datasheet_figures(catalog: Catalog) -> None:
    gpu = catalog.gpu("H100-PCIE-80GB")
    assert gpu.memory_bytes == 80 * GiB
    # Datasheet: TF32 756, BF16 1,513, FP8 3,026 TFLOPS with sparsity; FP32 51.
    assert gpu.peak_flops_for("bf16") == 1513e12 / 2
    assert gpu.peak_flops_for("tf32") == 756e12 / 2
    assert gpu.peak_flops_for("fp8") == 3026e12 / 2
    assert gpu.peak_flops_for("fp32") == 51e12
    assert gpu.hbm_bandwidth_bytes_per_second == 2.0e12
    assert gpu.intra_node_link == "pcie"
    assert gpu.nvlink_bandwidth_bytes_per_second == 128e9 / 2  # PCIe Gen5 x16
    assert gpu.tdp_watts == 350


def test_b200_datasheet_figures(catalog: Catalog) -> None:
    gpu = catalog.gpu("B200-SXM-180GB")
    assert gpu.memory_bytes == 180 * GiB
    # HGX B200: FP16/BF16 4.5 PFLOPS, FP8 9 PFLOPS, TF32 2.2 PFLOPS, all with sparsity.
    assert gpu.peak_flops_for("bf16") == 4.5e15 / 2
    assert gpu.peak_flops_for("fp8") == 9.0e15 / 2
    assert gpu.peak_flops_for("tf32") == 2.2e15 / 2
    assert gpu.peak_flops_for("fp32") == 75e12
    assert gpu.hbm_bandwidth_bytes_per_second == 7.7e12
    assert gpu.intra_node_link == "nvlink"
    assert gpu.nvlink_bandwidth_bytes_per_second == 1.8e12 / 2  # NVLink 5, each way
    assert gpu.network_bandwidth_bytes_per_second == 400e9 / 8  # one 400 Gb/s port per GPU
    assert gpu.tdp_watts == 1000


def test_l40s_datasheet_figures(catalog: Catalog) -> None:
    gpu = catalog.gpu("L40S")
    assert gpu.memory_bytes == 48 * GiB
    # The datasheet gives dense and sparse: BF16 362.05/733, FP8 733/1,466, TF32 183/366.
    assert gpu.peak_flops_for("bf16") == 362.05e12
    assert gpu.peak_flops_for("fp8") == 733e12
    assert gpu.peak_flops_for("tf32") == 183e12
    assert gpu.peak_flops_for("fp32") == 91.6e12
    assert gpu.hbm_bandwidth_bytes_per_second == 864e9
    assert gpu.intra_node_link == "pcie"
    assert gpu.nvlink_bandwidth_bytes_per_second == 64e9 / 2  # PCIe Gen4 x16, no NVLink
    assert gpu.tdp_watts == 350


@pytest.mark.parametrize(("name", "sheet"), SHEETS.items(), ids=list(SHEETS))
def test_datasheet_figures_of_the_latest_gpus(catalog: Catalog, name: str, sheet: Sheet) -> None:
    gpu = catalog.gpu(name)
    assert gpu.memory_bytes == sheet.memory_gib * GiB
    for precision, sparse in sheet.sparse_tflops.items():
        # Datasheets round to whole TFLOPS; the H100's (and so the H800's) dense peaks are the
        # architecture whitepaper's (494.7 against 989 / 2).
        assert gpu.peak_flops_for(precision) == pytest.approx(sparse * 1e12 / 2, rel=5e-4)
    assert gpu.peak_flops_for("fp32") == sheet.fp32_tflops * 1e12
    assert gpu.hbm_bandwidth_bytes_per_second == sheet.memory_tb_per_s * 1e12
    assert gpu.intra_node_link == sheet.link
    assert gpu.nvlink_bandwidth_bytes_per_second == sheet.link_gb_per_s_both_ways * GB_PER_S / 2
    assert gpu.network_bandwidth_bytes_per_second == sheet.network_gbit_per_s * GBIT_PER_S
    assert gpu.tdp_watts == sheet.tdp_watts


def test_the_h800_is_an_h100_with_a_narrower_nvlink(catalog: Catalog) -> None:
    h800, h100 = catalog.gpu("H800-SXM5-80GB"), catalog.gpu("H100-SXM5-80GB")
    assert h800.peak_flops == h100.peak_flops
    assert h800.memory_bytes == h100.memory_bytes
    assert h800.hbm_bandwidth_bytes_per_second == h100.hbm_bandwidth_bytes_per_second
    assert h800.nvlink_bandwidth_bytes_per_second == h100.nvlink_bandwidth_bytes_per_second * 4 / 9


@pytest.mark.parametrize(
    ("smi_name", "name"),
    [
        ("NVIDIA H800", "H800-SXM5-80GB"),
        ("NVIDIA H200 NVL", "H200-NVL-141GB"),
        ("NVIDIA GB200", "GB200-NVL72"),
    ],
)
def test_the_nvidia_smi_name_finds_the_gpu(catalog: Catalog, smi_name: str, name: str) -> None:
    assert catalog.gpu(smi_name).name == name


def test_nvlink_domains_other_than_the_node(catalog: Catalog) -> None:
    # The NVL72 rack: 18 compute trays of 4 GPUs in one NVLink domain. H200 NVL cards: a
    # 4-way bridge, the bridge groups of a node joined by PCIe Gen5 x16 (128 GB/s both ways).
    domains = {gpu.name: gpu.nvlink_domain_gpus for gpu in catalog.gpus}
    assert domains.pop("GB200-NVL72") == 72 == 18 * 4
    assert domains.pop("H200-NVL-141GB") == 4
    assert set(domains.values()) == {None}
    assert catalog.gpu("H200-NVL-141GB").pcie_bandwidth_bytes_per_second == 64e9


@pytest.mark.parametrize("name", ["B200-SXM-180GB", "GB200-NVL72", "L40S"])
def test_new_architectures_use_the_default_constants(catalog: Catalog, name: str) -> None:
    calibration = catalog.calibration
    architecture = catalog.gpu(name).architecture
    assert architecture not in dict(calibration.architectures)
    assert calibration.architecture(architecture) == calibration.architecture("default")


@pytest.mark.parametrize(("name", "alias", "gfd", "architecture"), RECENT, ids=IDS)
def test_a_small_plan_is_feasible_on_each(
    catalog: Catalog, name: str, alias: str, gfd: str, architecture: str
) -> None:
    result = plan(TrainingPlanSpec.model_validate(small_spec(alias)), catalog)
    assert result.gpu_type == name
    assert result.gpus == 8
    assert result.step_seconds > 0
    assert (
        result.memory.total_bytes <= result.memory.capacity_bytes == catalog.gpu(name).memory_bytes
    )


@pytest.mark.parametrize(("name", "alias", "gfd", "architecture"), RECENT, ids=IDS)
def test_trainplan_plan_accepts_an_alias(
    tmp_path: Path, name: str, alias: str, gfd: str, architecture: str
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(small_spec(alias)), encoding="utf-8")
    result = CliRunner(env={"NO_COLOR": "1", "COLUMNS": "200"}).invoke(
        main, ["plan", "-o", "json", str(path)]
    )
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["gpuType"] == name
