"""deploy/examples: whole TrainingPlan resources that between them show every objective."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from trainplan.api import API_VERSION, TrainingPlan, TrainingPlanSpec
from trainplan.planner import Catalog
from trainplan.planner.resolve import resolve_shape
from trainplan.planner.shapes import parameter_count

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))


@dataclass(frozen=True, slots=True)
class Example:
    """An example with the catalog names it resolves to."""

    path: Path
    resource: TrainingPlan
    preset: str | None
    gpu_type: str
    parameters: float

    @property
    def spec(self) -> TrainingPlanSpec:
        return self.resource.spec


@pytest.fixture(scope="module")
def examples(catalog: Catalog) -> list[Example]:
    found = []
    for path in EXAMPLES:
        resource = TrainingPlan.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        spec = resource.spec
        shape, _ = resolve_shape(spec, catalog)
        found.append(
            Example(
                path=path,
                resource=resource,
                preset=None if spec.model.preset is None else catalog.model(spec.model.preset).name,
                gpu_type=catalog.gpu(spec.hardware.gpu_type).name,
                parameters=parameter_count(shape),
            )
        )
    return found


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 6
    assert not [
        path for path in EXAMPLES_DIR.iterdir() if path.is_file() and path.suffix != ".yaml"
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_is_a_whole_training_plan_resource(path: Path) -> None:
    documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert len(documents) == 1
    document = documents[0]

    assert document["apiVersion"] == "trainplan.dev/v1alpha1" == API_VERSION
    assert document["kind"] == "TrainingPlan"
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(document)
    resource = TrainingPlan.model_validate(document)
    assert resource.api_version == "trainplan.dev/v1alpha1"
    assert resource.metadata.name
    assert resource.status is None
    # The document round-trips: every field it writes is one the API knows.
    assert TrainingPlan.model_validate(resource.to_document()) == resource


def test_examples_cover_a_llama2_7b_deadline_on_a100_80gb(examples: list[Example]) -> None:
    assert any(
        e.preset == "llama2-7b"
        and e.spec.objective.deadline is not None
        and e.gpu_type == "A100-SXM4-80GB"
        for e in examples
    )


def test_examples_cover_llama2_70b_with_pinned_gpus(examples: list[Example]) -> None:
    assert any(e.preset == "llama2-70b" and e.spec.objective.gpus is not None for e in examples)


def test_examples_cover_gpt3_175b_with_a_ceiling_only(examples: list[Example]) -> None:
    assert any(
        e.preset == "gpt3-175b"
        and e.spec.objective.max_gpus is not None
        and e.spec.objective.gpus is None
        and e.spec.objective.deadline is None
        for e in examples
    )


def test_examples_cover_a_trillion_parameter_model(examples: list[Example]) -> None:
    assert max(e.parameters for e in examples) >= 1e12


def test_examples_cover_v100_in_fp16(examples: list[Example]) -> None:
    assert any(
        e.gpu_type.startswith("V100") and e.spec.training.precision == "fp16" for e in examples
    )


def test_examples_cover_a_tiny_model_for_local_runs(examples: list[Example]) -> None:
    assert any(
        e.spec.objective.gpus is not None and e.spec.objective.gpus <= 8 and e.parameters < 1e8
        for e in examples
    )
