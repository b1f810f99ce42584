"""A small tokenized dataset the project generates itself (no download).

`python -m trainplan.runtime.dataset --output FILE [--tokens N] [--seed S]` writes N
byte-level tokens of English-like text from a deterministic generator: the same seed and
length give the same bytes on every machine.

Format (the one `trainplan.runtime.data` reads): a flat array of little-endian `uint16`
token ids, no header, N = file size / 2. Tokens are the bytes of ASCII text, so the
vocabulary is 256 (ids 0..255; only printable ASCII and newline occur). It is the
nanoGPT `.bin` layout, so any tokenizer's output stored that way works as well.

The text has structure a tiny model learns within a few dozen steps: sentences from a
fixed grammar and word lists, additions with their results, counting and alphabet runs,
and a few repeated phrases; a 2-layer, 64-wide model goes from ln(256) = 5.5 nats per
token to below 3 in about 30 steps of 8 sequences of 64 tokens.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

VOCAB_SIZE: Final = 256
"""Byte-level vocabulary."""

DEFAULT_TOKENS: Final = 1_000_000
DEFAULT_SEED: Final = 0

_ADJECTIVES: Final = (
    "small", "large", "red", "blue", "quick", "lazy", "happy", "old", "young", "bright",
)  # fmt: skip
_NOUNS: Final = (
    "cat", "dog", "bird", "fox", "tree", "river", "house", "child", "teacher", "robot",
)  # fmt: skip
_VERBS: Final = (
    "sees", "likes", "follows", "finds", "helps", "watches", "chases", "knows",
)  # fmt: skip
_NUMBERS: Final = (
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
)  # fmt: skip
_PHRASES: Final = (
    "the quick brown fox jumps over the lazy dog.",
    "to be or not to be, that is the question.",
    "all work and no play makes a dull day.",
    "a stitch in time saves nine.",
)
_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz"


def _sentence(rng: random.Random) -> str:
    subject = f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    obj = f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    return f"{subject} {rng.choice(_VERBS)} {obj}."


def _addition(rng: random.Random) -> str:
    a, b = rng.randrange(0, 50), rng.randrange(0, 50)
    return f"{a} + {b} = {a + b}."


def _counting(rng: random.Random) -> str:
    start = rng.randrange(0, 5)
    return " ".join(_NUMBERS[start : start + rng.randrange(4, 6)]) + "."


def _alphabet(rng: random.Random) -> str:
    start = rng.randrange(0, 16)
    return _ALPHABET[start : start + 10]


def generate_text(characters: int, seed: int = DEFAULT_SEED) -> str:
    """At least `characters` characters of lines from the generator, deterministically."""
    rng = random.Random(seed)
    makers = (_sentence, _sentence, _sentence, _addition, _counting, _alphabet)
    lines: list[str] = []
    length = 0
    while length < characters:
        line = rng.choice(_PHRASES) if rng.random() < 0.1 else rng.choice(makers)(rng)
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines) + "\n"


def generate_tokens(
    tokens: int, seed: int = DEFAULT_SEED
) -> np.ndarray[tuple[int], np.dtype[np.uint16]]:
    """`tokens` byte-level token ids of the generated text."""
    data = generate_text(tokens, seed).encode("ascii")[:tokens]
    return np.frombuffer(data, dtype=np.uint8).astype("<u2")


def write_dataset(path: str | os.PathLike[str], tokens: int, seed: int = DEFAULT_SEED) -> Path:
    """Write the dataset to `path` atomically (a temporary file, then a rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with temporary.open("wb") as file:
            file.write(generate_tokens(tokens, seed).tobytes())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def ensure_dataset(
    path: str | os.PathLike[str], tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED
) -> Path:
    """The dataset at `path`, generated first unless a file of `tokens` tokens is there."""
    target = Path(path)
    expected_bytes = tokens * np.dtype("<u2").itemsize
    if target.is_file() and target.stat().st_size == expected_bytes:
        return target
    return write_dataset(target, tokens, seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: write the dataset and print its path and size."""
    parser = argparse.ArgumentParser(
        prog="python -m trainplan.runtime.dataset",
        description="Write a byte-level (vocab 256) uint16 token file of generated text.",
    )
    parser.add_argument("--output", required=True, help="the .bin file to write")
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="tokens to write")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="generator seed")
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")
    path = write_dataset(args.output, args.tokens, args.seed)
    print(f"wrote {args.tokens} tokens (uint16, vocab {VOCAB_SIZE}) to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
