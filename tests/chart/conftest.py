"""Fixtures of the chart tests: the chart directory to render."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart.helm_render import CHART_DIR


@pytest.fixture(scope="session")
def chart_dir() -> Path:
    """charts/trainplan, as committed."""
    return CHART_DIR
