"""The simulated runs the ETA benchmark replays (`benchmarks.eta_runs`): their clock and
the plan's restart time they state."""

from __future__ import annotations

import statistics

from benchmarks.eta_runs import Failures, Regime, _Simulation, plan_facts_for

HOUR = 3600.0


def _regime(failures: Failures, total_steps: int = 2000) -> Regime:
    return Regime(
        name="simulated",
        description="a small run",
        total_steps=total_steps,
        step_seconds=60.0,
        tokens_per_step=1000,
        gpus=8,
        checkpoint_interval_steps=100,
        failures=failures,
    )


def test_a_major_outage_during_a_restart_joins_it_and_the_clock_never_goes_back() -> None:
    # Restarts of about 4 h and major outages of about 2 h every 4 h of wall-clock: most
    # majors come due while the run is down, and must not end that outage early.
    regime = _regime(
        Failures(
            per_hour=0.5,
            restart_median_seconds=4 * HOUR,
            major_per_day=6.0,
            major_median_hours=2.0,
        )
    )
    for seed in range(3):
        simulation = _Simulation(regime, seed, ())
        end = simulation.run()
        times = [time for time, _ in simulation.changes]
        assert times == sorted(times), f"seed {seed}: a step change before the previous one"
        assert times[-1] <= end
        assert simulation.interruptions > 20


def test_the_plan_states_the_mean_restart_time_the_run_has() -> None:
    failures = Failures(
        per_hour=2.0,
        restart_median_seconds=1800.0,
        restart_log_sd=1.0,
        long_share=0.1,
        long_median_hours=6.0,
    )
    regime = _regime(failures, total_steps=60_000)
    simulation = _Simulation(regime, 1, ())
    simulation.run()
    spans = [resume - stop for stop, resume in simulation.down]
    assert len(spans) > 10_000
    # The mean of heavy-tailed draws: within 8% over this many (its standard error is
    # about 2%).
    assert abs(statistics.fmean(spans) / failures.mean_restart_seconds - 1) < 0.08
    assert plan_facts_for(regime).restart_seconds == failures.mean_restart_seconds
    assert failures.mean_restart_seconds > 2.5 * failures.restart_median_seconds
