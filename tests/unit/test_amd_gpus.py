"""AMD GPUs: the MI300X in the catalog, planned with its Infinity Fabric, and placed
through AMD's device plugin (`amd.com/gpu`, `amd.com/gpu.product-name`) (pure)."""

from __future__ import annotations

from typing import Any, Final

import pytest

from tests.rendered_examples import training_container
from trainplan.api import TrainingPlanSpec
from trainplan.launcher import LauncherError, PlanRef, render_for
from trainplan.planner import Catalog, plan

REF: Final = PlanRef(name="mi300x", namespace="team-a", uid="5f1c2d3e-0000-4000-8000-000000000003")
SPEC: Final[dict[str, Any]] = {
    "model": {"preset": "llama3-8b"},
    "data": {"tokens": 1.0e10},
    "batch": {"globalBatchSize": 128},
    "hardware": {"gpuType": "MI300X"},
    "objective": {"gpus": 16},
    "job": {"image": "rocm/pytorch:latest"},
}


def _spec(**job: Any) -> TrainingPlanSpec:
    return TrainingPlanSpec.model_validate({**SPEC, "job": {**SPEC["job"], **job}})


def test_the_catalog_has_the_mi300x_with_its_datasheet_figures(catalog: Catalog) -> None:
    gpu = catalog.gpu("AMD_Instinct_MI300X_OAM")  # the node label's value finds it too
    assert gpu.name == "MI300X-OAM-192GB"
    assert (gpu.vendor, gpu.resource_name, gpu.product_label) == (
        "amd",
        "amd.com/gpu",
        "amd.com/gpu.product-name",
    )
    assert gpu.peak_flops_for("bf16") == 1307.4e12  # dense: half of 2,614.9 with sparsity
    assert gpu.memory_bytes == 192 * 2**30
    assert gpu.link_name == "Infinity Fabric"
    assert catalog.gpu("H100-SXM5-80GB").resource_name == "nvidia.com/gpu"


def test_a_plan_on_mi300x_says_infinity_fabric(catalog: Catalog) -> None:
    spec = _spec()
    result = plan(spec.model_copy(update={"parallelism": spec.parallelism.model_copy(
        update={"tensor": 2})}), catalog)  # fmt: skip
    assert result.gpu_type == "MI300X-OAM-192GB"
    assert any("over Infinity Fabric inside a node" in line for line in result.explanation)


def test_pods_request_amd_gpus_on_amd_nodes(catalog: Catalog) -> None:
    spec = _spec()
    objects = render_for(REF, spec, plan(spec, catalog), catalog)
    pod = objects[-1]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["amd.com/gpu.product-name"] == "AMD_Instinct_MI300X_OAM"
    assert "nvidia.com/gpu.product" not in pod["nodeSelector"]
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    resources = training_container(objects)["resources"]
    assert resources["limits"]["amd.com/gpu"] == "8"
    assert "nvidia.com/gpu" not in resources["limits"]


def test_a_contradicting_amd_label_or_count_is_refused(catalog: Catalog) -> None:
    result = plan(_spec(), catalog)
    for job, path in (
        ({"nodeSelector": {"amd.com/gpu.product-name": "AMD_Instinct_MI250X"}},
         "job.nodeSelector[amd.com/gpu.product-name]"),
        ({"resources": {"amd.com/gpu": "4"}}, "job.resources[amd.com/gpu]"),
    ):  # fmt: skip
        with pytest.raises(LauncherError) as caught:
            render_for(REF, _spec(**job), result, catalog)
        assert path in {p for p, _ in caught.value.problems}
