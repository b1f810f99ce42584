"""A Hugging Face `Trainer` callback that reports progress through a `TrainingReporter`.

    trainer = Trainer(..., callbacks=[TrainplanCallback(sequence_length=4096)])

- steps: `on_step_end` (once per optimizer step) reports `state.global_step`;
- tokens: `state.num_input_tokens_seen` when the Trainer counts them
  (`include_num_input_tokens_seen`), else global step x per-device batch x gradient
  accumulation x world size x `sequence_length` (0 when neither is known);
- loss: the `loss` of `on_log` (the mean since the previous log, every `logging_steps`);
- total steps: `state.max_steps` at `on_train_begin`, which also records a resumed step;
- checkpoints: `on_save`, timed from the previous step, log or evaluation (the Trainer
  saves after those); evaluation time is left out of the next step's duration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainplan.runtime.reporter import TrainingReporter

logger = logging.getLogger("trainplan.runtime")


class TrainplanCallback(TrainerCallback):
    """Reports the Trainer's steps, tokens, loss and checkpoints.

    Hooks before training (e.g. `Trainer.evaluate()` alone) do nothing. `reporter` None
    creates one at `on_train_begin` (`TrainingReporter.from_environment`
    with the Trainer's process ranks); `sequence_length` (tokens per sample) counts tokens
    when the Trainer does not.
    """

    def __init__(
        self,
        reporter: TrainingReporter | None = None,
        *,
        sequence_length: int | None = None,
        monotonic: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.reporter = reporter
        self.sequence_length = sequence_length
        self._monotonic = monotonic
        self._since = monotonic()  # end of the last step, log or evaluation
        self._warned_tokens = False

    def tokens(self, args: TrainingArguments, state: TrainerState) -> int:
        """Cumulative tokens after `state.global_step` steps."""
        if state.num_input_tokens_seen > 0:
            return int(state.num_input_tokens_seen)
        if self.sequence_length is None:
            if not self._warned_tokens and state.global_step > 0:
                self._warned_tokens = True
                logger.warning(
                    "TrainplanCallback counts no tokens: pass sequence_length or set"
                    " TrainingArguments(include_num_input_tokens_seen=...)"
                )
            return 0
        samples_per_step: int = (
            args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * int(args.world_size)
        )
        return state.global_step * samples_per_step * self.sequence_length

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if self.reporter is None:
            self.reporter = TrainingReporter.from_environment(
                global_rank=args.process_index, local_rank=args.local_process_index
            )
        self.reporter.set_total_steps(state.max_steps)
        self.reporter.resumed(state.global_step, self.tokens(args, state))
        self._since = self._monotonic()

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if self.reporter is not None:
            self.reporter.step(state.global_step, self.tokens(args, state))
        self._since = self._monotonic()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and self.reporter is not None:
            self.reporter.set_loss(float(loss))
        self._since = self._monotonic()

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if self.reporter is not None:
            self.reporter.reset_timer()
        self._since = self._monotonic()

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        now = self._monotonic()
        if self.reporter is not None:
            self.reporter.checkpoint(state.global_step, now - self._since)
        self._since = now
