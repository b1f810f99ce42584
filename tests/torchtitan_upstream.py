"""torchtitan's own parser for the flags the torchtitan launcher writes.

torchtitan 0.2.2 (`make setup` installs it without its dependencies) parses
`python -m torchtitan.train`'s overrides with `torchtitan.config.manager.ConfigManager`
(tyro over the `JobConfig` dataclasses of `torchtitan/config/job_config.py`). Its package
`__init__` loads its models and kernels (triton, GPU only), so only the `torchtitan.config`
package is loaded here, under a bare parent package. A flag the release does not know,
or a value its field cannot take, makes the parser exit (status 2) after printing why.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import Any

import pytest

RELEASE = "0.2.2"


def config_manager() -> Any:
    """torchtitan's ConfigManager class; the test is skipped, saying why, where it is not
    installed (a checkout without `make setup`)."""
    if "torchtitan.config.manager" not in sys.modules:
        spec = importlib.util.find_spec("torchtitan")
        if spec is None or spec.submodule_search_locations is None:
            pytest.skip(
                f"torchtitan=={RELEASE} is not installed: `make setup` installs it "
                "(pip install --no-deps) to parse the launcher's flags"
            )
        installed = importlib.metadata.version("torchtitan")
        if installed != RELEASE:
            pytest.fail(
                f"torchtitan {installed} is installed; the launcher writes {RELEASE}'s flags"
            )
        package = types.ModuleType("torchtitan")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules.setdefault("torchtitan", package)
    module = importlib.import_module("torchtitan.config.manager")
    return module.ConfigManager


def parse(args: Sequence[str]) -> Any:
    """The `JobConfig` torchtitan makes of `args` (flags only: `-m torchtitan.train`
    dropped); pytest fails the test with torchtitan's message if it refuses them."""
    manager = config_manager()()
    try:
        return manager.parse_args(list(args))
    except SystemExit as refused:
        pytest.fail(f"torchtitan {RELEASE} refuses {list(args)} (exit {refused.code})")
