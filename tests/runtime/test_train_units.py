"""The reference trainer's parts in-process: configuration, data, dataset, model and
checkpoint helpers (no process group)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.runtime.train_harness import flags
from trainplan.launcher import env as launcher_env
from trainplan.runtime import model as model_module
from trainplan.runtime.checkpoint import (
    capture_rng,
    checkpoint_name,
    compatibility,
    compatibility_problems,
    list_checkpoints,
    restore_rng,
)
from trainplan.runtime.config import ConfigError, ModelConfig, environment_names, load_config
from trainplan.runtime.data import Batches, BatchPosition
from trainplan.runtime.dataset import ensure_dataset, generate_text, generate_tokens
from trainplan.runtime.model import GPT, loss_function, parameter_count

# --- Configuration -------------------------------------------------------------------------


def test_environment_gives_the_plan_and_flags_override() -> None:
    environ = {
        "WORLD_SIZE": "8",
        launcher_env.TENSOR_PARALLEL: "2",
        launcher_env.PIPELINE_PARALLEL: "1",
        launcher_env.DATA_PARALLEL: "4",
        launcher_env.ZERO_STAGE: "1",
        launcher_env.SEQUENCE_PARALLEL: "true",
        launcher_env.MICRO_BATCH_SIZE: "2",
        launcher_env.GRADIENT_ACCUMULATION_STEPS: "4",
        launcher_env.GLOBAL_BATCH_SIZE: "32",
        launcher_env.TOTAL_STEPS: "100",
        launcher_env.PRECISION: "bf16",
        launcher_env.OPTIMIZER: "adamw",
        launcher_env.ACTIVATION_CHECKPOINTING: "selective",
        launcher_env.CHECKPOINT_DIR: "/checkpoints",
        launcher_env.CHECKPOINT_INTERVAL_STEPS: "25",
        launcher_env.METRICS_PORT: "9400",
        launcher_env.MODEL_LAYERS: "4",
        launcher_env.MODEL_HIDDEN_SIZE: "128",
        launcher_env.MODEL_ATTENTION_HEADS: "8",
        launcher_env.MODEL_KV_HEADS: "2",
        launcher_env.MODEL_FFN_HIDDEN_SIZE: "344",
        launcher_env.MODEL_GATED_MLP: "true",
        launcher_env.MODEL_VOCAB_SIZE: "512",
        launcher_env.MODEL_SEQUENCE_LENGTH: "128",
        launcher_env.MODEL_TIED_EMBEDDINGS: "false",
        launcher_env.PLAN_NAME: "demo",
    }
    config = load_config(["--total-steps", "7", "--precision", "fp32"], environ)
    layout = config.layout
    assert (layout.tensor_parallel, layout.data_parallel, layout.zero_stage) == (2, 4, 1)
    assert layout.sequence_parallel
    assert (layout.micro_batch_size, layout.gradient_accumulation_steps) == (2, 4)
    assert layout.global_batch_size == 32
    assert config.total_steps == 7  # the flag wins
    assert config.precision == "fp32"
    assert config.activation_checkpointing == "selective"
    assert config.checkpoint_dir == "/checkpoints"
    assert config.checkpoint_interval_steps == 25
    assert config.metrics_port == 9400
    assert config.model == ModelConfig(4, 128, 8, 2, 344, True, 512, 128, False)
    assert config.plan_name == "demo"
    assert config.tokens_per_step == 32 * 128


def test_every_launcher_variable_is_read() -> None:
    """The trainer reads every TRAINPLAN_ variable the launcher sets."""
    assert set(environment_names()) == set(launcher_env.NAMES)


def test_defaults_derive_data_parallel_and_accumulation() -> None:
    config = load_config(
        ["--micro-batch-size", "2", "--global-batch-size", "16"], {"WORLD_SIZE": "4"}
    )
    assert config.layout.data_parallel == 4
    assert config.layout.gradient_accumulation_steps == 2


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            flags(tensor_parallel=3, attention_heads=4, pipeline_parallel=2, precision="fp8"),
            {"WORLD_SIZE": "6"},
        )
    text = "\n".join(caught.value.problems)
    assert "no fp8 training" in text
    assert "pipeline parallelism" in text
    assert "attention heads 4 is not divisible by the tensor degree 3" in text


# --- Data ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_dataset(tmp_path_factory.mktemp("data") / "tokens.bin", 50_000)


@pytest.mark.parametrize("source", ["synthetic", "file"])
def test_batches_are_a_pure_function_of_the_position(source: str, token_file: Path) -> None:
    path = "synthetic" if source == "synthetic" else str(token_file)

    def batches() -> Batches:
        return Batches(path, micro_batch_size=3, sequence_length=16, vocab_size=256, seed=7)

    first, second = batches(), batches()
    position = BatchPosition(step=5, micro_batch=1, data_rank=0)
    inputs, targets = first.get(position)
    again_inputs, again_targets = second.get(position)
    assert torch.equal(inputs, again_inputs)
    assert torch.equal(targets, again_targets)
    assert inputs.shape == targets.shape == (3, 16)
    assert inputs.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the next tokens
    for other in (
        BatchPosition(5, 1, 1),  # another data-parallel rank
        BatchPosition(5, 0, 0),  # another micro-batch
        BatchPosition(6, 1, 0),  # another step
    ):
        assert not torch.equal(first.get(other)[0], inputs), other


def test_file_batches_are_windows_of_the_file(token_file: Path) -> None:
    tokens = np.fromfile(token_file, dtype="<u2")
    batches = Batches(
        str(token_file), micro_batch_size=2, sequence_length=8, vocab_size=256, seed=1
    )
    inputs, targets = batches.get(BatchPosition(0, 0, 0))
    text = tokens.tobytes()
    for row_in, row_target in zip(inputs.tolist(), targets.tolist(), strict=True):
        window = np.array([*row_in, row_target[-1]], dtype="<u2").tobytes()
        assert window in text


def test_token_file_must_fit_the_vocabulary(token_file: Path) -> None:
    with pytest.raises(ConfigError, match="outside the model's vocabulary of 100"):
        Batches(str(token_file), micro_batch_size=1, sequence_length=8, vocab_size=100, seed=0)


# --- Dataset -------------------------------------------------------------------------------


def test_dataset_is_deterministic_text(tmp_path: Path) -> None:
    assert generate_text(500, seed=3) == generate_text(500, seed=3)
    assert generate_text(500, seed=3) != generate_text(500, seed=4)
    tokens = generate_tokens(1000)
    assert tokens.dtype == np.dtype("<u2")
    assert tokens.shape == (1000,)
    assert int(tokens.max()) < 128
    path = ensure_dataset(tmp_path / "d.bin", 1000)
    assert path.stat().st_size == 2000
    modified = path.stat().st_mtime_ns
    assert ensure_dataset(path, 1000) == path
    assert path.stat().st_mtime_ns == modified  # present: not written again
    assert np.array_equal(np.fromfile(path, dtype="<u2"), tokens)


def test_dataset_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainplan.runtime.dataset import main

    assert main(["--output", str(tmp_path / "x.bin"), "--tokens", "300", "--seed", "2"]) == 0
    assert (tmp_path / "x.bin").stat().st_size == 600
    assert "300 tokens" in capsys.readouterr().out


# --- Model ---------------------------------------------------------------------------------

TINY = ModelConfig(layers=2, hidden_size=64, attention_heads=4, kv_heads=2, ffn_hidden_size=128)


def test_model_shapes_and_parameter_count() -> None:
    torch.manual_seed(0)
    model = GPT(TINY)
    logits = model(torch.randint(0, 256, (2, 16)))
    assert logits.shape == (2, 16, 256)
    # embedding + output + 2 x (q, k, v, o, mlp, 2 norms) + final norm
    attention = 64 * 64 * 2 + 64 * 32 * 2
    block = attention + 2 * 64 * 128 + 2 * 64
    assert parameter_count(model) == 2 * 256 * 64 + 2 * block + 64
    tied = GPT(ModelConfig(tied_embeddings=True, gated_mlp=True))
    assert tied.output.weight is tied.tok_embeddings.weight
    assert parameter_count(tied) == parameter_count(GPT(ModelConfig(gated_mlp=True))) - 256 * 64


def test_model_is_causal() -> None:
    torch.manual_seed(0)
    model = GPT(TINY).eval()
    tokens = torch.randint(0, 256, (1, 16))
    changed = tokens.clone()
    changed[0, 10] = (changed[0, 10] + 1) % 256
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.allclose(before[0, :10], after[0, :10], atol=1e-6)
    assert not torch.allclose(before[0, 10:], after[0, 10:])


@pytest.mark.parametrize(
    ("recompute", "attention_calls", "mlp_calls"),
    [("none", 2, 2), ("selective", 4, 2), ("full", 4, 4)],
)
def test_activation_checkpointing_recomputes_the_plan_level(
    monkeypatch: pytest.MonkeyPatch, recompute: str, attention_calls: int, mlp_calls: int
) -> None:
    """Per training step of a 2-layer model: `selective` recomputes the attention core
    only, `full` whole blocks; gradients are the same."""
    counts = {"attention": 0, "mlp": 0}
    original_core = model_module.attention_core
    original_mlp = model_module.FeedForward.forward

    def counting_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        counts["attention"] += 1
        return original_core(q, k, v)

    def counting_mlp(self: model_module.FeedForward, x: torch.Tensor) -> torch.Tensor:
        counts["mlp"] += 1
        return original_mlp(self, x)

    monkeypatch.setattr(model_module, "attention_core", counting_core)
    monkeypatch.setattr(model_module.FeedForward, "forward", counting_mlp)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = GPT(TINY, recompute)  # type: ignore[arg-type]
    torch.autograd.backward(loss_function(model(tokens[:, :-1]), tokens[:, 1:]))
    assert counts == {"attention": attention_calls, "mlp": mlp_calls}

    torch.manual_seed(0)
    reference = GPT(TINY)
    torch.autograd.backward(loss_function(reference(tokens[:, :-1]), tokens[:, 1:]))
    for (name, parameter), (_, expected) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        assert parameter.grad is not None
        assert expected.grad is not None
        assert torch.allclose(parameter.grad, expected.grad, atol=1e-6), name


# --- Checkpoint helpers --------------------------------------------------------------------


def test_checkpoint_listing_ignores_temporaries(tmp_path: Path) -> None:
    for step in (5, 10, 15):
        (tmp_path / checkpoint_name(step)).write_bytes(b"x")
    (tmp_path / ".step-00000020.pt.tmp-123").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("")
    assert [step for step, _ in list_checkpoints(tmp_path)] == [5, 10, 15]
    assert list_checkpoints(tmp_path / "missing") == []


def test_compatibility_names_each_difference() -> None:
    base = load_config([], {})
    other = load_config(["--hidden-size", "32", "--optimizer", "sgd"], {})
    problems = compatibility_problems(compatibility(base), compatibility(other))
    assert problems == [
        "hidden_size: checkpoint 64, now 32",
        "ffn_hidden_size: checkpoint 256, now 128",  # 4 x hidden when not given
        "optimizer: checkpoint 'adamw', now 'sgd'",
    ]
    same_layout = load_config(["--zero-stage", "3", "--precision", "fp32"], {})
    assert compatibility_problems(compatibility(base), compatibility(same_layout)) == []


def test_rng_state_round_trips_through_weights_only_load(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    state = capture_rng()
    torch.save(state, tmp_path / "rng.pt")
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    loaded = torch.load(tmp_path / "rng.pt", weights_only=True)
    restore_rng(loaded)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_adapters_are_a_configuration_error(method: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(["--training-method", method, "--lora-rank", "8"], {})
    (problem,) = caught.value.problems
    assert f"training method {method}" in problem
    assert "deepspeed" in problem


def test_full_fine_tuning_runs_as_pre_training() -> None:
    config = load_config(["--training-method", "full"], {})
    assert config.total_steps == load_config([], {}).total_steps


def test_context_parallelism_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(["--context-parallel", "2"], {})
    (problem,) = caught.value.problems
    assert "context parallelism 2" in problem
