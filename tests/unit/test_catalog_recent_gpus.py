"""The GPUs added to the catalog for issue 17, item 5: H100 PCIe, B200 and L40S.

Each loads with its datasheet figures (dense peaks: half the sparse ones), a small plan is
feasible on it, and `trainplan plan` accepts it by an alias. Blackwell and Ada Lovelace have
no constants of their own in `calibration.yaml`, so they are planned with `default`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trainplan.api import TrainingPlanSpec
from trainplan.cli.main import main
from trainplan.planner import Catalog, plan

GiB = 2**30

# name, an alias, its GPU Feature Discovery label, architecture
RECENT = [
    ("H100-PCIE-80GB", "h100-pcie", "NVIDIA-H100-PCIe", "hopper"),
    ("B200-SXM-180GB", "B200", "NVIDIA-B200", "blackwell"),
    ("L40S", "l40s-48gb", "NVIDIA-L40S", "ada"),
]
IDS = [name for name, *_ in RECENT]


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


@pytest.mark.parametrize("name", ["B200-SXM-180GB", "L40S"])
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
