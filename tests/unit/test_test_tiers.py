"""`make test` runs the test tiers in two pytest runs (Makefile: PURE_TESTS on two
workers, PROCESS_TESTS one test at a time): every directory of tests/ holding test
modules is in exactly one of them, so none is left out of CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tier(makefile: str, name: str) -> list[str]:
    match = re.search(rf"^{name} := (.+)$", makefile, re.MULTILINE)
    assert match, f"no {name} in the Makefile"
    return match.group(1).split()


def test_every_test_directory_is_in_exactly_one_tier() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pure, process = _tier(makefile, "PURE_TESTS"), _tier(makefile, "PROCESS_TESTS")
    with_tests = {
        path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
    }
    assert len(with_tests) >= 8
    assert sorted(pure + process) == sorted(with_tests)
    assert "$(BIN)/pytest -n 2 $(PURE_TESTS)" in makefile
    assert "$(BIN)/pytest $(PROCESS_TESTS)" in makefile
