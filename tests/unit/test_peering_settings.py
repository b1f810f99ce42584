"""Several operator replicas through Kopf's peering: the priority that makes the oldest
replica the leader, what `configure_kopf` and `run_operator` give Kopf, and the
`trainplan operator --peering*` options. (A leader killed mid-launch and its standby
taking over is tested against the emulated API in tests/integration/test_peering.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest
from click.testing import CliRunner

from trainplan.cli import operator_command
from trainplan.cli.main import main
from trainplan.controller import ControllerContext, OperatorConfig, run_operator
from trainplan.controller import runner as runner_module
from trainplan.controller.config import (
    PRIORITY_TIEBREAK_VALUES,
    TIMER_STOP_POLLING_SECONDS,
    configure_kopf,
    seniority_priority,
)
from trainplan.planner import Catalog

STARTED = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)


def test_the_earlier_replica_has_the_higher_priority() -> None:
    older = seniority_priority(STARTED, tiebreak=0)
    newer = seniority_priority(STARTED + timedelta(milliseconds=1), tiebreak=1023)
    assert older > newer


def test_the_tiebreak_separates_replicas_started_in_the_same_millisecond() -> None:
    priorities = {seniority_priority(STARTED, tiebreak) for tiebreak in (0, 1, 1023)}
    assert len(priorities) == 3


@pytest.mark.parametrize("year", [1970, 2026, 2100])
def test_priorities_are_positive_and_exact_in_json(year: int) -> None:
    started = datetime(year, 1, 1, tzinfo=UTC)
    for tiebreak in (0, PRIORITY_TIEBREAK_VALUES - 1):
        priority = seniority_priority(started, tiebreak)
        assert 0 < priority < 1 << 53
        assert int(float(priority)) == priority


@pytest.mark.parametrize("tiebreak", [-1, PRIORITY_TIEBREAK_VALUES])
def test_a_tiebreak_out_of_range_is_refused(tiebreak: int) -> None:
    with pytest.raises(ValueError, match="tiebreak"):
        seniority_priority(STARTED, tiebreak)


def test_a_lifetime_below_one_second_is_refused() -> None:
    with pytest.raises(ValueError, match="peering_lifetime_seconds"):
        OperatorConfig(peering_lifetime_seconds=0)


def test_kopf_gets_the_lifetime_and_no_keep_alive_log_lines() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, OperatorConfig(peering_name="trainplan", peering_lifetime_seconds=15))
    assert settings.peering.lifetime == 15
    assert settings.peering.stealth is True


def test_a_deleted_plans_stopped_timer_is_noticed_within_seconds() -> None:
    # Kopf deletes a plan once its ETA timer has exited, checking again every
    # `cancellation_polling` seconds while a revision still runs (60 by default).
    settings = kopf.OperatorSettings()
    assert settings.background.cancellation_polling == 60
    configure_kopf(settings, OperatorConfig())
    assert settings.background.cancellation_polling == TIMER_STOP_POLLING_SECONDS <= 5


@pytest.fixture
def kopf_arguments(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Stands in for `kopf.operator`: records the arguments it is called with."""
    recorded: dict[str, Any] = {}

    async def operator(**kwargs: Any) -> None:
        recorded.update(kwargs)

    monkeypatch.setattr(runner_module.kopf, "operator", operator)
    return recorded


@pytest.mark.asyncio
async def test_standalone_without_a_peering_name(
    kopf_arguments: dict[str, Any], catalog: Catalog
) -> None:
    await run_operator(ControllerContext(catalog=catalog))
    assert kopf_arguments["standalone"] is True
    assert kopf_arguments["peering_name"] is None
    assert kopf_arguments["priority"] is None


@pytest.mark.asyncio
async def test_peered_with_the_priority_of_its_start_time(
    kopf_arguments: dict[str, Any], catalog: Catalog
) -> None:
    context = ControllerContext(
        catalog=catalog, config=OperatorConfig(peering_name="trainplan"), clock=lambda: STARTED
    )
    await run_operator(context)
    assert kopf_arguments["standalone"] is False
    assert kopf_arguments["peering_name"] == "trainplan"
    lowest, highest = (seniority_priority(STARTED, t) for t in (0, PRIORITY_TIEBREAK_VALUES - 1))
    assert lowest <= kopf_arguments["priority"] <= highest


@pytest.mark.asyncio
async def test_a_given_priority_is_kept(kopf_arguments: dict[str, Any], catalog: Catalog) -> None:
    config = OperatorConfig(peering_name="trainplan", peering_priority=7)
    await run_operator(ControllerContext(catalog=catalog, config=config))
    assert kopf_arguments["priority"] == 7


# --- trainplan operator --peering* ----------------------------------------------------------


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[ControllerContext]:
    """Stands in for the operator: records the context the command would run with."""
    contexts: list[ControllerContext] = []

    async def run(context: ControllerContext, **_: Any) -> None:
        contexts.append(context)

    monkeypatch.setattr(operator_command, "run_operator", run)
    return contexts


def _operator(*args: str) -> Any:
    return CliRunner().invoke(main, ["operator", *args])


def test_standalone_by_default(started: list[ControllerContext]) -> None:
    result = _operator()
    assert result.exit_code == 0, result.output
    config = started[0].config
    assert (config.peering_name, config.peering_priority) == (None, None)
    assert config.peering_lifetime_seconds == 60


def test_peering_options(started: list[ControllerContext]) -> None:
    result = _operator(
        "--peering", "trainplan", "--peering-priority", "100", "--peering-lifetime", "20"
    )
    assert result.exit_code == 0, result.output
    config = started[0].config
    assert config.peering_name == "trainplan"
    assert config.peering_priority == 100
    assert config.peering_lifetime_seconds == 20


def test_a_priority_needs_peering(started: list[ControllerContext]) -> None:
    result = _operator("--peering-priority", "100")
    assert result.exit_code == 2
    assert "--peering-priority needs --peering" in result.output
    assert started == []


@pytest.mark.parametrize("lifetime", ["0", "3601"])
def test_the_lifetime_is_bounded(started: list[ControllerContext], lifetime: str) -> None:
    result = _operator("--peering", "trainplan", "--peering-lifetime", lifetime)
    assert result.exit_code == 2
    assert "--peering-lifetime" in result.output
    assert started == []


def test_replicas_cannot_each_manage_the_webhook_configuration(
    started: list[ControllerContext],
) -> None:
    result = _operator(
        "--peering", "trainplan", "--webhook-port", "9443", "--webhook-managed", "trainplan.dev"
    )
    assert result.exit_code == 2
    assert "--webhook-cert-dir" in result.output
    assert started == []
