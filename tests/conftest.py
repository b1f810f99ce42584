"""Shared fixtures: the packaged catalog, loaded once per test session."""

import pytest

from trainplan.planner import Catalog, load_catalog
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import GPUSpec


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def calibration(catalog: Catalog) -> Calibration:
    return catalog.calibration


@pytest.fixture(scope="session")
def a100(catalog: Catalog) -> GPUSpec:
    return catalog.gpu("A100-SXM4-80GB")
