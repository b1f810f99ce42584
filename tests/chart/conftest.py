"""Fixtures of the chart tests: the chart directory to render."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

import pytest

from tests.chart.helm_render import CHART_DIR

SHARED_FILES: Final = ("files/trainplan-dashboard.json", "files/prometheus-rules.yaml")
"""Chart files written with the dashboard and the alerting rules (not by the chart's own
templates), which the dashboard ConfigMap and the PrometheusRule embed."""

_PLACEHOLDERS: Final = {
    "files/trainplan-dashboard.json": '{"title": "placeholder", "panels": []}\n',
    "files/prometheus-rules.yaml": (
        "groups:\n  - name: placeholder\n    rules:\n"
        "      - record: placeholder:up\n        expr: up\n"
    ),
}


def missing_shared_files(chart_dir: Path = CHART_DIR) -> list[str]:
    return [name for name in SHARED_FILES if not (chart_dir / name).is_file()]


@pytest.fixture(scope="session")
def chart_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """charts/trainplan; while the dashboard or the rules file is not there yet, a copy
    of it with a placeholder in its place (tests of their content skip meanwhile)."""
    missing = missing_shared_files()
    if not missing:
        return CHART_DIR
    copy = tmp_path_factory.mktemp("chart") / "trainplan"
    shutil.copytree(CHART_DIR, copy)
    for name in missing:
        (copy / name).write_text(_PLACEHOLDERS[name], encoding="utf-8")
    return copy
