"""Every layout the planner proposes for a framework launches under it (dense, MoE in fp8
and long-context specs): the launcher renders it without a `LauncherError`, the
reference trainer's own configuration checks (`trainplan.runtime.config`, its exit-3
refusals) accept its environment, and torchtitan's own parser takes its flags. The
planner and the launcher each keep a list of what a framework runs; this test holds them
to each other over specs whose best layouts differ."""

from __future__ import annotations

from typing import Any

import pytest

from tests import torchtitan_upstream
from tests.rendered_examples import training_container
from trainplan.api import Plan, TrainingPlanSpec
from trainplan.launcher import PlanRef, render_for
from trainplan.planner import Catalog, plan
from trainplan.runtime.config import load_config

REF = PlanRef(name="launch", namespace="default")

SPECS: dict[str, dict[str, Any]] = {
    "7b-64": {
        "model": {"preset": "llama2-7b"},
        "batch": {"globalBatchSize": 512},
        "objective": {"gpus": 64},
    },
    "70b-2048": {
        "model": {"preset": "llama2-70b"},
        "batch": {"globalBatchSize": 1024},
        "objective": {"gpus": 2048},
    },
    "70b-deadline": {
        "model": {"preset": "llama2-70b"},
        "batch": {"globalBatchSize": 512},
        "objective": {"deadline": "60d", "maxGPUs": 1024},
    },
    "175b-under-1024": {
        "model": {"preset": "gpt3-175b"},
        "batch": {"globalBatchSize": 1536},
        "objective": {"maxGPUs": 1024},
    },
}
"""Dense models whose chosen layouts and alternatives span tensor, pipeline, data,
interleaving and every ZeRO stage."""

JOBS: dict[str, dict[str, Any]] = {
    "reference": {},
    "megatron": {"framework": "megatron"},
    "torchtitan": {"framework": "torchtitan"},
    "deepspeed": {"framework": "deepspeed", "command": ["python", "train.py"]},
}
IMAGE = "registry.example/train:1.0"


def _layouts(result: Plan) -> list[Plan]:
    """The plan, and the plan with each alternative's layout."""
    per_node = result.gpus // result.nodes
    return [result] + [
        result.model_copy(
            update={"layout": other.layout, "gpus": other.gpus, "nodes": other.gpus // per_node}
        )
        for other in result.alternatives
    ]


@pytest.mark.parametrize("framework", list(JOBS))
@pytest.mark.parametrize("name", list(SPECS))
def test_every_proposed_layout_launches(catalog: Catalog, name: str, framework: str) -> None:
    document = {
        **SPECS[name],
        "data": {"tokens": 1.0e11},
        "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
        "job": {**JOBS[framework], "image": IMAGE},
    }
    spec = TrainingPlanSpec.model_validate(document)
    for candidate in _layouts(plan(spec, catalog)):
        objects = render_for(REF, spec, candidate, catalog)
        container = training_container(objects)
        if framework == "reference":
            environ = {item["name"]: item["value"] for item in container["env"] if "value" in item}
            environ["WORLD_SIZE"] = str(candidate.gpus)
            config = load_config([], environ)
            assert config.layout.pipeline_parallel == 1
        if framework == "torchtitan":
            args: list[str] = container["args"]
            start = next(i for i, arg in enumerate(args) if arg.startswith("--max-restarts="))
            config = torchtitan_upstream.parse(args[start + 3 :])
            assert config.parallelism.pipeline_parallel_degree == candidate.layout.pipeline


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_every_proposed_moe_and_fp8_layout_launches(catalog: Catalog, framework: str) -> None:
    """Mixture-of-experts layouts (expert degrees searched) in fp8 on H100s, for the two
    frameworks that run both."""
    document = {
        "model": {"preset": "mixtral-8x7b"},
        "data": {"tokens": 1.0e11},
        "batch": {"globalBatchSize": 512},
        "hardware": {"gpuType": "H100-SXM5-80GB", "gpusPerNode": 8},
        "training": {"precision": "fp8"},
        "objective": {"gpus": 256},
        "job": {**JOBS[framework], "image": IMAGE},
    }
    spec = TrainingPlanSpec.model_validate(document)
    candidates = _layouts(plan(spec, catalog))
    assert any(candidate.layout.expert > 1 for candidate in candidates)
    expert_flag, fp8_flag = {
        "megatron": ("--expert-model-parallel-size", "--fp8-format"),
        "torchtitan": ("--parallelism.expert_parallel_degree", "--model.converters"),
    }[framework]
    for candidate in candidates:
        args: list[str] = training_container(render_for(REF, spec, candidate, catalog))["args"]
        assert args[args.index(expert_flag) + 1] == str(candidate.layout.expert)
        assert fp8_flag in args


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_every_proposed_long_context_layout_launches(catalog: Catalog, framework: str) -> None:
    """Sequences of 65,536 tokens (context parallelism searched) for the two frameworks
    that split a sequence over ranks."""
    document = {
        "model": {"preset": "llama3-8b", "sequenceLength": 65_536},
        "data": {"tokens": 1.0e10},
        "batch": {"globalBatchSize": 64},
        "hardware": {"gpuType": "H100-SXM5-80GB", "gpusPerNode": 8},
        "objective": {"maxGPUs": 64},
        "job": {**JOBS[framework], "image": IMAGE},
    }
    spec = TrainingPlanSpec.model_validate(document)
    candidates = _layouts(plan(spec, catalog))
    assert any(candidate.layout.context > 1 for candidate in candidates)
    context_flag = {
        "megatron": "--context-parallel-size",
        "torchtitan": "--parallelism.context_parallel_degree",
    }[framework]
    for candidate in candidates:
        args: list[str] = training_container(render_for(REF, spec, candidate, catalog))["args"]
        if candidate.layout.context > 1:
            assert args[args.index(context_flag) + 1] == str(candidate.layout.context)
        else:
            assert context_flag not in args
