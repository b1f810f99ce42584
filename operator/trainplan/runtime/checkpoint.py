"""Checkpoints of the reference trainer: gathered to rank 0, written atomically, resumed
from the newest complete one.

Mechanism: `torch.distributed.checkpoint.state_dict.get_model_state_dict` /
`get_optimizer_state_dict` with `StateDictOptions(full_state_dict=True, cpu_offload=True)`
gather the whole (unsharded) model and optimizer state to rank 0's host memory, whatever
the wrapping (DDP, FSDP2's DTensor shards, tensor-parallel DTensors, or both); rank 0
writes one file with `torch.save`. Loading is the reverse: rank 0 reads the file and
`set_model_state_dict` / `set_optimizer_state_dict` with `broadcast_from_rank0=True`
scatter it into each rank's shards. One file per checkpoint, written by one process,
readable without torch.distributed (`torch.load(path, weights_only=True)`) and
independent of the sharding, and only rank 0 needs to see the checkpoint volume. The
price: rank 0 holds the full state in host memory while saving (fine for the models the
reference trainer is for; DCP's sharded save is the way for larger ones).

Files: `<dir>/step-<8-digit step>.pt`. Atomicity: rank 0 writes
`<dir>/.step-<step>.pt.tmp-<pid>`, fsyncs it, renames it to the final name with
`os.replace` and fsyncs the directory; a file named `step-*.pt` is therefore complete, and
a crash mid-write leaves only a temporary file, removed at the next start. After each
save the oldest checkpoints beyond `keep` are deleted.

Contents (a dict; tensors, numbers, strings, lists and dicts only):
`format`, `step` (completed optimizer steps), `tokens` (cumulative), `data_position` (the
next step's index: batches are a pure function of it, `trainplan.runtime.data`),
`compatibility` (world layout, batch split, model shape, optimizer: a checkpoint whose
values differ is refused with a `ConfigError`), `config` (the whole configuration, for
people), `model`, `optimizer`, `scaler` (the fp16 gradient scaler, or None) and `rng`
(one entry per global rank: torch CPU and CUDA generator states, Python `random`,
NumPy's global generator).
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from trainplan.runtime.config import ConfigError, TrainerConfig

logger = logging.getLogger("trainplan.runtime")

FORMAT_VERSION: Final = 1
"""Version of the checkpoint dict; bumped when its keys change meaning."""

_NAME: Final = re.compile(r"^step-(\d{8,})\.pt$")
_TEMPORARY: Final = re.compile(r"^\.step-\d+\.pt\.tmp-\d+$")

SAVE_OPTIONS: Final = StateDictOptions(full_state_dict=True, cpu_offload=True)
LOAD_OPTIONS: Final = StateDictOptions(
    full_state_dict=True, cpu_offload=True, broadcast_from_rank0=True
)


class Scaler(Protocol):
    """The part of a gradient scaler a checkpoint needs."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint of `step`."""
    return f"step-{step:08d}.pt"


def compatibility(config: TrainerConfig) -> dict[str, Any]:
    """What a checkpoint and the run resuming it must agree on."""
    layout, model = config.layout, config.model
    return {
        "world_size": layout.world_size,
        "tensor_parallel": layout.tensor_parallel,
        "pipeline_parallel": layout.pipeline_parallel,
        "data_parallel": layout.data_parallel,
        "micro_batch_size": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.gradient_accumulation_steps,
        "global_batch_size": layout.global_batch_size,
        "layers": model.layers,
        "hidden_size": model.hidden_size,
        "attention_heads": model.attention_heads,
        "kv_heads": model.kv_heads,
        "ffn_hidden_size": model.ffn_hidden_size,
        "gated_mlp": model.gated_mlp,
        "vocab_size": model.vocab_size,
        "sequence_length": model.sequence_length,
        "tied_embeddings": model.tied_embeddings,
        "optimizer": config.optimizer,
    }


def compatibility_problems(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`name checkpoint X, now Y` for each value that differs."""
    return [
        f"{key}: checkpoint {stored.get(key)!r}, now {value!r}"
        for key, value in current.items()
        if stored.get(key) != value
    ]


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints in `directory`, (step, path), oldest first."""
    if not directory.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    for entry in directory.iterdir():
        match = _NAME.match(entry.name)
        if match and entry.is_file():
            found.append((int(match.group(1)), entry))
    return sorted(found)


# --- RNG state -----------------------------------------------------------------------------


def capture_rng() -> dict[str, Any]:
    """This process's generator states, in types `torch.load(weights_only=True)` accepts."""
    numpy_state: dict[str, Any] = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Set this process's generators to a `capture_rng` result."""
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
    numpy_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy_state["bit_generator"],
            "state": {
                "key": numpy_state["key"].numpy().astype(np.uint32),
                "pos": numpy_state["pos"],
            },
            "has_gauss": numpy_state["has_gauss"],
            "gauss": numpy_state["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    cuda_states = state["cuda"]
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states[: torch.cuda.device_count()])


# --- Save and load -------------------------------------------------------------------------


class UnreadableCheckpointError(RuntimeError):
    """The checkpoint directory holds checkpoints, none of which loads."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a loaded checkpoint says about the run."""

    step: int
    tokens: int
    data_position: int
    path: str


class Checkpointer:
    """Saves and loads the trainer's state in `directory` (collective: call on every rank)."""

    def __init__(self, directory: str, keep: int) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def _fsync_directory(self) -> None:
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def prepare(self) -> None:
        """Rank 0: create the directory (so that an unusable checkpoint path fails the
        start, not the first save) and delete the temporary files of interrupted saves."""
        if self.rank != 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for entry in self.directory.iterdir():
            if _TEMPORARY.match(entry.name):
                entry.unlink(missing_ok=True)

    def save(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Scaler | None,
        *,
        step: int,
        tokens: int,
        config: TrainerConfig,
    ) -> tuple[Path, float]:
        """Write the checkpoint of `step`; returns its path and the seconds it took."""
        started = time.perf_counter()
        model_state = get_model_state_dict(model, options=SAVE_OPTIONS)
        optimizer_state = get_optimizer_state_dict(model, optimizer, options=SAVE_OPTIONS)
        rng_states: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(capture_rng(), rng_states, dst=0)
        path = self.directory / checkpoint_name(step)
        if self.rank == 0:
            payload = {
                "format": FORMAT_VERSION,
                "step": step,
                "tokens": tokens,
                "data_position": step,
                "compatibility": compatibility(config),
                "config": config.as_dict(),
                "torch_version": str(torch.__version__),
                "model": model_state,
                "optimizer": optimizer_state,
                "scaler": scaler.state_dict() if scaler is not None else None,
                "rng": rng_states,
            }
            self.directory.mkdir(parents=True, exist_ok=True)
            temporary = self.directory / f".{path.name}.tmp-{os.getpid()}"
            try:
                with temporary.open("wb") as file:
                    torch.save(payload, file)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, path)
            finally:
                temporary.unlink(missing_ok=True)
            self._fsync_directory()
            self._prune()
        dist.barrier()
        return path, time.perf_counter() - started

    def _prune(self) -> None:
        for _, old in list_checkpoints(self.directory)[: -self.keep]:
            old.unlink(missing_ok=True)

    def _read_newest(self) -> tuple[dict[str, Any] | None, str]:
        """Rank 0: the newest checkpoint that loads, and its path ('' for none).

        A damaged newest file falls back to the one before; UnreadableCheckpointError when
        there are checkpoints but none loads (starting over would silently discard the
        run's progress, and the next checkpoints would delete the old ones).
        """
        found = list_checkpoints(self.directory)
        for step, path in reversed(found):
            try:
                payload = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as error:  # a damaged file: try the one before
                logger.warning("checkpoint %s (step %d) cannot be read: %s", path, step, error)
                continue
            if isinstance(payload, dict) and payload.get("format") == FORMAT_VERSION:
                return cast(dict[str, Any], payload), str(path)
            logger.warning("checkpoint %s has an unknown format; skipped", path)
        if found:
            raise UnreadableCheckpointError(
                f"none of the {len(found)} checkpoints in {self.directory} can be loaded; "
                f"move them away to start over"
            )
        return None, ""

    def load_latest(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Scaler | None,
        config: TrainerConfig,
    ) -> Resumed | None:
        """Load the newest complete checkpoint into every rank, if there is one.

        ConfigError (on every rank) when it was written by another layout or model.
        """
        payload: dict[str, Any] | None = None
        header: list[Any] = [None]
        if self.rank == 0:
            try:
                payload, path = self._read_newest()
            except UnreadableCheckpointError as error:
                payload, path = None, ""
                header[0] = {"error": str(error)}
            if payload is not None:
                header[0] = {
                    "path": path,
                    "step": int(payload["step"]),
                    "tokens": int(payload["tokens"]),
                    "data_position": int(payload["data_position"]),
                    "compatibility": payload["compatibility"],
                    "scaler": payload.get("scaler"),
                    "rng": payload.get("rng"),
                }
        dist.broadcast_object_list(header, src=0)
        meta = cast(dict[str, Any] | None, header[0])
        if meta is None:
            return None
        if "error" in meta:  # raised on every rank, not only where it was found
            raise UnreadableCheckpointError(meta["error"])
        problems = compatibility_problems(meta["compatibility"], compatibility(config))
        if problems:
            raise ConfigError(
                [
                    f"checkpoint {meta['path']} (step {meta['step']}) was written by a "
                    f"different layout or model; resume with the same one or use a new "
                    f"checkpoint directory"
                ]
                + [f"  {problem}" for problem in problems]
            )
        set_model_state_dict(
            model, payload["model"] if payload is not None else {}, options=LOAD_OPTIONS
        )
        set_optimizer_state_dict(
            model,
            optimizer,
            payload["optimizer"] if payload is not None else {},
            options=LOAD_OPTIONS,
        )
        if scaler is not None and meta["scaler"]:
            scaler.load_state_dict(meta["scaler"])
        rng_states = meta["rng"]
        if isinstance(rng_states, list) and len(rng_states) == self.world_size:
            restore_rng(rng_states[self.rank])
        return Resumed(
            step=meta["step"],
            tokens=meta["tokens"],
            data_position=meta["data_position"],
            path=meta["path"],
        )
