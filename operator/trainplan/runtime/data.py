"""Deterministic training batches: synthetic tokens or a tokenized file.

Every micro-batch is a pure function of (seed, optimizer step, micro-batch index,
data-parallel rank): nothing is consumed from an iterator, so resuming at step s needs
only s, and the ranks of one data-parallel group (the tensor-parallel ranks) get the same
batch while different data-parallel ranks get different ones.

- Synthetic (`--data synthetic`): uniform random token ids from a `torch.Generator` seeded
  with a hash of the four numbers; for throughput, not for learning.
- A tokenized file (`--data PATH`): a flat array of little-endian `uint16` token ids with
  no header (the nanoGPT `.bin` layout; tokens = file size / 2), opened with
  `numpy.memmap`. Each sequence is `sequence_length + 1` consecutive tokens starting at an
  offset drawn uniformly from the file by a `numpy` generator seeded with the four numbers
  (inputs are the first `sequence_length`, targets the last). Every token id must be below
  the model's vocabulary size; files up to `VOCAB_CHECK_MAX_TOKENS` are checked in full
  when opened. `trainplan.runtime.dataset` writes such files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

import numpy as np
import torch

from trainplan.runtime.config import SYNTHETIC, ConfigError

TOKEN_DTYPE: Final = np.dtype("<u2")
"""Token ids on disk: little-endian unsigned 16-bit."""

VOCAB_CHECK_MAX_TOKENS: Final = 1 << 28
"""Files with at most this many tokens (512 MiB) are checked against the vocabulary."""

_CHECK_CHUNK_TOKENS: Final = 1 << 24


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a micro-batch comes from: the 0-based optimizer step being computed, the
    micro-batch within the step and the data-parallel rank."""

    step: int
    micro_batch: int
    data_rank: int


def _seed_words(seed: int, position: BatchPosition) -> list[int]:
    return [seed, position.step, position.micro_batch, position.data_rank]


def _torch_seed(seed: int, position: BatchPosition) -> int:
    """A 63-bit seed mixing the four numbers (torch generators take one integer)."""
    text = ",".join(str(word) for word in _seed_words(seed, position)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


class Batches:
    """Micro-batches of (inputs, targets), each (micro_batch_size, sequence_length) int64."""

    def __init__(
        self,
        source: str,
        *,
        micro_batch_size: int,
        sequence_length: int,
        vocab_size: int,
        seed: int,
    ) -> None:
        self.source = source
        self.micro_batch_size = micro_batch_size
        self.sequence_length = sequence_length
        self.vocab_size = vocab_size
        self.seed = seed
        self._tokens: np.memmap[tuple[int], np.dtype[np.uint16]] | None = None
        if source != SYNTHETIC:
            self._tokens = open_tokens(source, sequence_length, vocab_size)

    @property
    def token_count(self) -> int | None:
        """Tokens in the file; None for synthetic data."""
        return None if self._tokens is None else int(self._tokens.shape[0])

    def get(self, position: BatchPosition) -> tuple[torch.Tensor, torch.Tensor]:
        """The micro-batch at `position` (always the same for the same position)."""
        span = self.sequence_length + 1
        if self._tokens is None:
            generator = torch.Generator().manual_seed(_torch_seed(self.seed, position))
            sample = torch.randint(
                0, self.vocab_size, (self.micro_batch_size, span), generator=generator
            )
        else:
            rng = np.random.default_rng(_seed_words(self.seed, position))
            last_start = self._tokens.shape[0] - span
            starts = rng.integers(0, last_start + 1, size=self.micro_batch_size)
            rows = np.stack([self._tokens[start : start + span] for start in starts])
            sample = torch.from_numpy(rows.astype(np.int64))
        return sample[:, :-1].contiguous(), sample[:, 1:].contiguous()


def open_tokens(
    path: str, sequence_length: int, vocab_size: int
) -> np.memmap[tuple[int], np.dtype[np.uint16]]:
    """The token file as a read-only memmap; ConfigError when it cannot serve the model."""
    try:
        tokens: np.memmap[tuple[int], np.dtype[np.uint16]] = np.memmap(
            path, dtype=TOKEN_DTYPE, mode="r"
        )
    except (OSError, ValueError) as error:
        raise ConfigError([f"data file {path!r} cannot be read: {error}"]) from error
    count = int(tokens.shape[0])
    if count < sequence_length + 1:
        raise ConfigError(
            [
                f"data file {path!r} holds {count} tokens, fewer than one sequence of "
                f"{sequence_length} + 1"
            ]
        )
    if count <= VOCAB_CHECK_MAX_TOKENS:
        largest = 0
        for start in range(0, count, _CHECK_CHUNK_TOKENS):
            largest = max(largest, int(tokens[start : start + _CHECK_CHUNK_TOKENS].max()))
        if largest >= vocab_size:
            raise ConfigError(
                [
                    f"data file {path!r} holds token id {largest}, outside the model's "
                    f"vocabulary of {vocab_size}"
                ]
            )
    return tokens
