"""The ETA accuracy benchmark's plan (`benchmarks.eta_accuracy`) is one the planner and
the spec accept, with the failure rate the benchmark injects (it once stopped at the
spec's bound on `interruptionsPerGPUHour` without any test noticing)."""

from __future__ import annotations

import pytest

from benchmarks.eta_accuracy import NOMINAL_RUN_SECONDS, PROCESSES, _local_plan
from trainplan.eta import plan_facts


def test_the_plan_states_one_interruption_per_run() -> None:
    local = _local_plan(fleet_prior=False)
    facts = plan_facts(local.plan, local.spec)
    per_run = facts.interruptions_per_gpu_hour * PROCESSES * NOMINAL_RUN_SECONDS / 3600.0
    assert per_run == pytest.approx(1.0)
    assert facts.restart_seconds == 5.0


def test_the_fleet_prior_plan_expects_almost_no_failure() -> None:
    local = _local_plan(fleet_prior=True)
    facts = plan_facts(local.plan, local.spec)
    assert facts.interruptions_per_gpu_hour * PROCESSES * NOMINAL_RUN_SECONDS / 3600.0 < 0.01
