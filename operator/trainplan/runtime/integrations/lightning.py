"""A PyTorch Lightning callback that reports progress through a `TrainingReporter`.

    trainer = lightning.Trainer(..., callbacks=[TrainplanCallback(tokens_per_step=gbs * seq)])

- steps: `on_train_batch_end` when `trainer.global_step` advanced (an optimizer step
  happened; with gradient accumulation most batches end without one);
- tokens: global step x `tokens_per_step` (tokens of one optimizer step, all ranks);
- loss: from `outputs["loss"]` (or `outputs` when `training_step` returns a tensor): with
  automatic optimization, the sum over the step's batches of the losses Lightning divided
  by `accumulate_grad_batches`, i.e. the step's mean loss; with manual optimization, the
  last batch's. Summed on the device and read every `loss_every_n_steps` steps (reading a
  GPU tensor waits for the GPU); 0 never reads it;
- total steps: `trainer.max_steps`, else `trainer.estimated_stepping_batches`, at
  `on_train_start`, which also records a resumed step;
- checkpoints: `on_save_checkpoint` marks a save; it is timed from the previous step or
  validation to the next hook after it (Lightning calls `on_save_checkpoint` before it
  writes the file); validation time is left out of the next step's duration.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.types import STEP_OUTPUT

from trainplan.runtime.reporter import TrainingReporter


class TrainplanCallback(pl.Callback):
    """Reports the Trainer's optimizer steps, tokens, loss and checkpoints.

    `reporter` None creates one in `setup` (`TrainingReporter.from_environment` with the
    Trainer's global and local rank).
    """

    def __init__(
        self,
        reporter: TrainingReporter | None = None,
        *,
        tokens_per_step: int,
        loss_every_n_steps: int = 1,
        monotonic: Callable[[], float] = time.perf_counter,
    ) -> None:
        if tokens_per_step < 0 or loss_every_n_steps < 0:
            raise ValueError("tokens_per_step and loss_every_n_steps must be >= 0")
        self.reporter = reporter
        self.tokens_per_step = tokens_per_step
        self.loss_every_n_steps = loss_every_n_steps
        self._monotonic = monotonic
        self._last_step = 0
        self._since = monotonic()  # end of the last step or validation
        self._pending_checkpoint: tuple[int, float] | None = None  # (step, since)
        self._loss: torch.Tensor | float | None = None  # of the batches since the last step

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.reporter is None and stage == "fit":
            self.reporter = TrainingReporter.from_environment(
                global_rank=trainer.global_rank, local_rank=trainer.local_rank
            )

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.reporter is None:
            return
        total = trainer.max_steps
        if total < 0:
            estimate = float(trainer.estimated_stepping_batches)
            total = int(estimate) if math.isfinite(estimate) else 0
        self.reporter.set_total_steps(total)
        self._last_step = trainer.global_step
        self.reporter.resumed(self._last_step, self._last_step * self.tokens_per_step)
        self._since = self._monotonic()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._finish_checkpoint()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.reporter is None:
            return
        if self.loss_every_n_steps:
            batch_loss = _loss(outputs)
            if batch_loss is not None:
                if pl_module.automatic_optimization and self._loss is not None:
                    self._loss = self._loss + batch_loss
                else:
                    self._loss = batch_loss
        step = trainer.global_step
        if step == self._last_step:
            return
        self._last_step = step
        loss = None
        if self._loss is not None and step % max(self.loss_every_n_steps, 1) == 0:
            loss = float(self._loss)
        self._loss = None
        self.reporter.step(step, step * self.tokens_per_step, loss)
        self._since = self._monotonic()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish_checkpoint()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish_checkpoint()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.reporter is not None:
            self.reporter.reset_timer()
        self._since = self._monotonic()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish_checkpoint()

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._finish_checkpoint()
        self._pending_checkpoint = (trainer.global_step, self._since)

    def _finish_checkpoint(self) -> None:
        """Report the checkpoint marked by `on_save_checkpoint`, now that it is written."""
        pending, self._pending_checkpoint = self._pending_checkpoint, None
        if pending is None or self.reporter is None:
            return
        step, since = pending
        now = self._monotonic()
        self.reporter.checkpoint(step, now - since)
        self._since = now


def _loss(outputs: STEP_OUTPUT) -> torch.Tensor | float | None:
    """The loss in `training_step`'s outputs, detached (None when there is none)."""
    value = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, int | float):
        return float(value)
    return None
