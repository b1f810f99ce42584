"""Command lines of the benchmarks (pure: argparse only).

Most benchmarks take no argument and run for seconds to twenty minutes; `benchmark_parser`
gives each one `--help` (the module's docstring: what it measures, how long it takes) and
refuses an argument it does not know (exit 2) instead of starting a long run that ignores
it. A benchmark with options adds them to the parser it returns.
"""

from __future__ import annotations

import argparse


def benchmark_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `python -m <module>`, its help the module's docstring `doc`."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=(doc or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
