"""`benchmarks.reference_gpu --profile` on CPU: the reference trainer runs under
torch.profiler as a child process group and its operators' time comes back by kind."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from benchmarks import reference_gpu
from benchmarks.trainer_profile import OTHER


def test_a_profiled_tiny_run_records_where_its_steps_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child imports `benchmarks`: run it from the repository root.
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    # main() turns SIGINT and SIGTERM into a stop of its run: pytest's own come back after.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    flags = ["--tiny", "--profile", "--steps", "9", "--only", "tiny-gelu-tied"]
    # The budget counts from the module's import, which pytest did at collection, long
    # before: give it that time too (the shape's own 90 s limit still bounds the run).
    elapsed = time.monotonic() - reference_gpu._STARTED
    flags += ["--budget-seconds", str(round(elapsed + 120.0))]
    try:
        code = reference_gpu.main([*flags, "--output", str(tmp_path)])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert code == 0
    document = json.loads((tmp_path / reference_gpu.OUTPUT_NAME).read_text(encoding="utf-8"))
    assert document["profiled"] is True
    (record,) = document["shapes"]
    assert record["status"] == "ok"
    profile = record["kernel_profile"]
    assert profile["complete"] is True
    assert profile["source"] == "operators' own CPU time"
    assert profile["steps"] == reference_gpu.PROFILED_STEPS
    assert profile["skipped_steps"] == 2  # the shape's warm-up steps
    kinds = profile["kinds"]
    for kind in ("matrix multiplies", "attention", "softmax and cross-entropy", OTHER):
        assert kinds[kind]["seconds_per_step"] > 0.0
    assert profile["kernel_seconds_per_step"] == pytest.approx(
        sum(entry["seconds_per_step"] for entry in kinds.values())
    )
    assert 0 < len(profile["longest"]) <= 15
    assert not any(entry["name"].startswith("ProfilerStep") for entry in profile["longest"])
