"""What a local run reads of this machine: available memory, CPU cores, free disk,
whether a module is installed, and the processes of a run (Linux `/proc`).

`Machine` bundles the readers so that tests inject sizes; `this_machine()` reads the real
ones.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MEMINFO: Final = Path("/proc/meminfo")
PROC: Final = Path("/proc")


def mem_available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """`MemAvailable` of /proc/meminfo in bytes; None where there is none."""
    try:
        text = meminfo.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit.strip() == "kB" else 1)
    return None


def cpu_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def free_disk_bytes(path: Path) -> int:
    """Free bytes for an unprivileged user on the file system of `path` (which exists)."""
    return int(shutil.disk_usage(path).free)


def module_installed(name: str) -> bool:
    """Whether `name` (a top-level module) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class Machine:
    """The readers a local run uses (injected in tests)."""

    available_memory_bytes: Callable[[], int | None]
    cpu_cores: Callable[[], int]
    free_disk_bytes: Callable[[Path], int]
    module_installed: Callable[[str], bool]


def this_machine() -> Machine:
    """The readers of this machine (they call `shutil.disk_usage` and
    `importlib.util.find_spec` when called, so that a test can monkeypatch those)."""
    return Machine(
        available_memory_bytes=mem_available_bytes,
        cpu_cores=cpu_cores,
        free_disk_bytes=free_disk_bytes,
        module_installed=module_installed,
    )


def processes_with_environment(entry: str, proc: Path = PROC) -> list[int]:
    """PIDs of the live processes (not this one, not zombies) whose environment holds
    `entry` ("NAME=value"), read from /proc/PID/environ (only this user's processes can
    be read). A run marks its children so: torchrun starts its workers in sessions of
    their own, so that no process group holds them all."""
    wanted = entry.encode() + b"\0"
    own = os.getpid()
    found: list[int] = []
    with contextlib.suppress(OSError):
        for child in proc.iterdir():
            if not child.name.isdigit() or int(child.name) == own:
                continue
            with contextlib.suppress(OSError):
                environment = b"\0" + (child / "environ").read_bytes() + b"\0"
                if b"\0" + wanted in environment:
                    found.append(int(child.name))
    return found
