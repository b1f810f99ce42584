"""The Hugging Face and Lightning callbacks, driven by the real trainers on CPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments

from trainplan.runtime import TrainingReporter
from trainplan.runtime.integrations.huggingface import TrainplanCallback as HFCallback
from trainplan.runtime.integrations.lightning import TrainplanCallback as LightningCallback

SEQUENCE_LENGTH = 8
VOCAB = 16


def sample(reporter: TrainingReporter, name: str) -> float | None:
    return reporter.registry.get_sample_value(name)


@pytest.fixture
def reporter() -> Iterator[TrainingReporter]:
    with TrainingReporter(total_steps=0, port=None, gpu_collector=False) as made:
        yield made


# --- Hugging Face -----------------------------------------------------------------------------


class TokenDataset(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, samples: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.input_ids = torch.randint(0, VOCAB, (samples, SEQUENCE_LENGTH), generator=generator)

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[index], "labels": self.input_ids[index]}


class TinyLanguageModel(nn.Module):
    """Embedding + linear head: a causal-LM-shaped model small enough for a unit test."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, 4)
        self.head = nn.Linear(4, VOCAB)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.head(self.embedding(input_ids))
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return {"loss": loss, "logits": logits}


def hf_arguments(output_dir: Path, **overrides: Any) -> TrainingArguments:
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": 6,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "learning_rate": 1e-2,
        "logging_steps": 2,
        "save_strategy": "steps",
        "save_steps": 3,
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "seed": 0,
    }
    settings.update(overrides)
    return TrainingArguments(**settings)


def hf_train(
    args: TrainingArguments, callback: HFCallback, resume_from_checkpoint: str | None = None
) -> list[dict[str, float]]:
    trainer = Trainer(
        model=TinyLanguageModel(),
        args=args,
        train_dataset=TokenDataset(64),
        callbacks=[callback],
    )
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    return trainer.state.log_history


@pytest.mark.parametrize("count_tokens", [False, True], ids=["sequence-length", "trainer-count"])
def test_huggingface_trainer(
    tmp_path: Path, reporter: TrainingReporter, count_tokens: bool
) -> None:
    tokens_per_step = 2 * 2 * 1 * SEQUENCE_LENGTH  # batch x accumulation x world x sequence
    if count_tokens:
        args = hf_arguments(tmp_path, include_num_input_tokens_seen="all")
        callback = HFCallback(reporter)  # the Trainer counts; no sequence length needed
    else:
        args = hf_arguments(tmp_path)
        callback = HFCallback(reporter, sequence_length=SEQUENCE_LENGTH)
    history = hf_train(args, callback)

    assert sample(reporter, "trainplan_train_step") == 6
    assert sample(reporter, "trainplan_train_total_steps") == 6
    assert sample(reporter, "trainplan_train_tokens") == 6 * tokens_per_step
    losses = [entry["loss"] for entry in history if "loss" in entry]
    assert len(losses) == 3
    assert sample(reporter, "trainplan_train_loss") == pytest.approx(losses[-1])
    assert sample(reporter, "trainplan_train_step_seconds_count") == 5  # step 1 is warm-up
    assert sample(reporter, "trainplan_train_checkpoint_step") == 6
    assert sample(reporter, "trainplan_train_checkpoint_seconds_count") == 2  # steps 3 and 6


def test_huggingface_resume(tmp_path: Path, reporter: TrainingReporter) -> None:
    hf_train(hf_arguments(tmp_path), HFCallback(reporter, sequence_length=SEQUENCE_LENGTH))
    with TrainingReporter(total_steps=0, port=None, gpu_collector=False) as resumed:
        callback = HFCallback(resumed, sequence_length=SEQUENCE_LENGTH)
        hf_train(
            hf_arguments(tmp_path, max_steps=8),
            callback,
            resume_from_checkpoint=str(tmp_path / "checkpoint-6"),
        )
        assert sample(resumed, "trainplan_train_step") == 8
        assert sample(resumed, "trainplan_train_total_steps") == 8
        assert sample(resumed, "trainplan_train_tokens") == 8 * 2 * 2 * SEQUENCE_LENGTH
        # steps 7 and 8 ran here; the first after the resume observes nothing
        assert sample(resumed, "trainplan_train_step_seconds_count") == 1


def test_huggingface_callback_events(tmp_path: Path, reporter: TrainingReporter) -> None:
    """The hooks one by one, with real TrainingArguments / TrainerState / TrainerControl."""
    args = hf_arguments(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=8)
    state, control = TrainerState(max_steps=1000, global_step=0), TrainerControl()
    callback = HFCallback(reporter, sequence_length=1024)
    callback.on_log(args, state, control, logs={"loss": 9.0})  # before training: ignored
    callback.on_train_begin(args, state, control)
    for step in range(1, 11):
        state.global_step = step
        callback.on_step_end(args, state, control)
    callback.on_log(args, state, control, logs={"loss": 2.5, "learning_rate": 1e-4})
    callback.on_log(args, state, control, logs={"eval_loss": 3.0})  # not a training loss
    callback.on_save(args, state, control)

    assert sample(reporter, "trainplan_train_total_steps") == 1000
    assert sample(reporter, "trainplan_train_step") == 10
    assert sample(reporter, "trainplan_train_tokens") == 10 * 4 * 8 * 1 * 1024
    assert sample(reporter, "trainplan_train_loss") == 2.5
    assert sample(reporter, "trainplan_train_checkpoint_step") == 10
    assert sample(reporter, "trainplan_train_step_seconds_count") == 9

    state.num_input_tokens_seen = 123_456  # the Trainer's own count wins
    assert callback.tokens(args, state) == 123_456


# --- Lightning ---------------------------------------------------------------------------------


class TinyRegression(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.losses: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = nn.functional.mse_loss(self.layer(inputs), targets)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def random_batches() -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1))
    return DataLoader(data, batch_size=8)


def lightning_trainer(**overrides: Any) -> lightning.Trainer:
    settings: dict[str, Any] = {
        "max_steps": 5,
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    settings.update(overrides)
    return lightning.Trainer(**settings)


pytestmark = [
    # Lightning's advice to use DataLoader workers, irrelevant for 8 tiny batches.
    pytest.mark.filterwarnings("ignore:The '(train|val)_dataloader' does not have many workers"),
    # lightning 2.6 on torch 2.13 builds a torch.utils._pytree.LeafSpec, which torch deprecates.
    pytest.mark.filterwarnings(
        "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"
    ),
]


@pytest.mark.parametrize("accumulation", [1, 2])
def test_lightning_trainer(reporter: TrainingReporter, accumulation: int) -> None:
    module = TinyRegression()
    callback = LightningCallback(reporter, tokens_per_step=32)
    trainer = lightning_trainer(callbacks=[callback], accumulate_grad_batches=accumulation)
    trainer.fit(module, random_batches())

    assert trainer.global_step == 5
    assert len(module.losses) == 5 * accumulation  # batches, not steps
    assert sample(reporter, "trainplan_train_step") == 5
    assert sample(reporter, "trainplan_train_total_steps") == 5
    assert sample(reporter, "trainplan_train_tokens") == 5 * 32
    # the last step's mean loss over its batches
    last_step_loss = sum(module.losses[-accumulation:]) / accumulation
    assert sample(reporter, "trainplan_train_loss") == pytest.approx(last_step_loss, rel=1e-6)
    assert sample(reporter, "trainplan_train_step_seconds_count") == 4


# The resumed run has no ModelCheckpoint and a plain DataLoader: it needs only the step.
@pytest.mark.filterwarnings(
    "ignore:Be aware that when using `ckpt_path`, callbacks used to create the checkpoint"
)
@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch")
def test_lightning_checkpoints_and_resume(tmp_path: Path, reporter: TrainingReporter) -> None:
    trainer = lightning_trainer(
        callbacks=[
            LightningCallback(reporter, tokens_per_step=32),
            ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1),
        ],
        enable_checkpointing=True,
    )
    trainer.fit(TinyRegression(), random_batches())
    assert sample(reporter, "trainplan_train_checkpoint_step") == 4
    assert sample(reporter, "trainplan_train_checkpoint_seconds_count") == 2
    seconds = sample(reporter, "trainplan_train_checkpoint_seconds_sum")
    assert seconds is not None
    assert seconds > 0

    with TrainingReporter(total_steps=0, port=None, gpu_collector=False) as resumed:
        trainer = lightning_trainer(
            callbacks=[LightningCallback(resumed, tokens_per_step=32)], max_steps=7
        )
        trainer.fit(TinyRegression(), random_batches(), ckpt_path=tmp_path / "epoch=0-step=4.ckpt")
        assert sample(resumed, "trainplan_train_step") == 7
        assert sample(resumed, "trainplan_train_tokens") == 7 * 32
        assert sample(resumed, "trainplan_train_step_seconds_count") == 2  # steps 6, 7


def test_lightning_total_steps_estimated(reporter: TrainingReporter) -> None:
    trainer = lightning_trainer(
        callbacks=[LightningCallback(reporter, tokens_per_step=32, loss_every_n_steps=0)],
        max_steps=-1,
        max_epochs=2,
    )
    trainer.fit(TinyRegression(), random_batches())
    assert sample(reporter, "trainplan_train_total_steps") == 16  # 2 epochs x 8 batches
    assert sample(reporter, "trainplan_train_step") == 16
    loss = sample(reporter, "trainplan_train_loss")
    assert loss is not None
    assert loss != loss  # noqa: PLR0124  NaN: loss reading was turned off
