"""Durations, and the budget tracker's phases and limits on a fake clock."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kagent.agent.loop.budget import BudgetTracker, FakeClock, SystemClock
from kagent.agent.settings import Budget, format_duration, parse_duration
from kagent.core.errors import KagentError


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("3h", 3 * 3600),
        ("90m", 90 * 60),
        ("2h30m", 2.5 * 3600),
        ("45s", 45),
        ("1.5h", 5400),
        ("1h15m30s", 3600 + 15 * 60 + 30),
        ("600", 600),
        ("0.5", 0.5),
        (" 2H 30M ", 9000),
        ("1m0s", 60),
    ],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "0",
        "0h",
        "0m0s",
        "-5m",
        "-600",
        "abc",
        "3x",
        "h",
        "2h30",
        "30m2h",
        "1e3",
        "inf",
        "nan",
        "3 hours",
        "5m5m",
    ],
)
def test_bad_durations_are_refused(text):
    with pytest.raises(KagentError) as caught:
        parse_duration(text)
    assert caught.value.message == f"--budget takes a duration such as 3h, 90m or 2h30m; got '{text}'"


@pytest.mark.parametrize("text", ["169h", "10081m", "100000000000000000000"])
def test_budgets_past_seven_days_are_refused(text):
    assert parse_duration("168h") == 7 * 24 * 3600  # the most taken
    with pytest.raises(KagentError) as caught:
        parse_duration(text)
    assert caught.value.message == f"--budget is at most 168h00m (7 days); got '{text}'"


def test_durations_format():
    assert [format_duration(s) for s in (0, 12.4, 270, 7500, -3)] == ["0s", "12s", "4m30s", "2h05m", "0s"]


def test_clocks():
    clock = FakeClock(10.0)
    clock.advance(2.5)
    assert clock.now() == 12.5
    with pytest.raises(ValueError):
        clock.advance(-1)
    system = SystemClock()
    assert system.now() <= system.now()


def test_budget_validates_and_sizes_the_final_slice():
    assert Budget(wall_s=3 * 3600).final_slice_s == pytest.approx(1080)  # 10 %
    assert Budget(wall_s=300).final_slice_s == 60  # the 60 s floor
    assert Budget(wall_s=80).final_slice_s == 40  # never more than half...
    assert Budget(wall_s=100, final_slice=0.7).final_slice_s == pytest.approx(70)  # ...unless asked
    assert Budget(wall_s=100, final_slice=0).final_slice_s == 50
    for bad in [
        dict(wall_s=0),
        dict(wall_s=10, final_slice=1.0),
        dict(wall_s=10, max_tokens=0),
        dict(wall_s=10, max_cost_usd=-1.0),
        dict(wall_s=10, surprise=1),
    ]:
        with pytest.raises(ValidationError):
            Budget(**bad)
    assert Budget.model_fields["wall_s"].description


def test_phases_follow_the_wall_clock():
    clock = FakeClock(1000.0)
    tracker = BudgetTracker(Budget(wall_s=3600), clock)
    assert tracker.deadline() == 4600
    assert tracker.final_slice_starts() == 4600 - 360
    assert tracker.phase() == "explore" and tracker.exhausted() is None
    clock.advance(3600 - 360 - 1)
    assert tracker.phase() == "explore"
    clock.advance(1)
    assert tracker.phase() == "final" and tracker.exhausted() is None
    assert tracker.remaining() == 360 and tracker.elapsed() == 3240
    clock.advance(360)
    assert tracker.phase() == "over"
    assert "wall-time budget of 1h00m" in (tracker.exhausted() or "")
    clock.advance(500)
    assert tracker.remaining() == 0 and tracker.elapsed() == 4100


def test_a_resumed_run_counts_only_running_time():
    clock = FakeClock(50.0)
    tracker = BudgetTracker(Budget(wall_s=1000), clock, spent_before_s=800, tokens_before=7, cost_before_usd=0.5)
    assert tracker.elapsed() == 800 and tracker.remaining() == 200
    assert tracker.deadline() == 250 and tracker.final_slice_starts() == 150  # 10 % of 1000 s
    assert tracker.phase() == "explore"
    assert (tracker.tokens, tracker.cost_usd) == (7, 0.5)
    clock.advance(99)
    assert tracker.phase() == "explore"
    clock.advance(1)
    assert tracker.phase() == "final" and tracker.elapsed() == 900
    clock.advance(100)
    assert tracker.phase() == "over" and tracker.exhausted()
    with pytest.raises(ValueError):
        BudgetTracker(Budget(wall_s=10), clock, spent_before_s=-1)


def test_a_segment_started_past_the_budget_is_over_at_once():
    tracker = BudgetTracker(Budget(wall_s=100), FakeClock(), spent_before_s=150)
    assert tracker.phase() == "over" and tracker.remaining() == 0 and tracker.exhausted()


def test_cost_ends_exploring_but_not_the_run():
    clock = FakeClock()
    tracker = BudgetTracker(Budget(wall_s=3600, max_cost_usd=2.0), clock)
    tracker.charge(1000, 1.25)
    tracker.charge(500, 0.5)
    assert (tracker.tokens, tracker.cost_usd) == (1500, pytest.approx(1.75))
    assert tracker.exhausted() is None and tracker.phase() == "explore"
    tracker.charge(10, 0.25)
    reason = tracker.exhausted()
    assert reason is not None and "cost" in reason and "$2.00" in reason
    assert tracker.phase() == "final"
    clock.advance(3600)
    assert tracker.phase() == "over" and "wall-time" in (tracker.exhausted() or "")
    with pytest.raises(ValueError):
        tracker.charge(-1, 0.0)


def test_tokens_end_exploring():
    tracker = BudgetTracker(Budget(wall_s=3600, max_tokens=10_000), FakeClock())
    tracker.charge(9_999, 0.0)
    assert tracker.exhausted() is None
    tracker.charge(1, 0.0)
    reason = tracker.exhausted()
    assert reason is not None and "token" in reason and "10,000" in reason
    assert tracker.phase() == "final"


def test_summary_for_the_budget_line():
    clock = FakeClock()
    tracker = BudgetTracker(Budget(wall_s=600, max_tokens=100, max_cost_usd=1.0), clock, spent_before_s=100)
    tracker.charge(40, 0.1)
    clock.advance(50)
    summary = tracker.summary()
    assert summary == {
        "elapsed": 150,
        "remaining": 450,
        "wall": 600,
        "tokens": 40,
        "max_tokens": 100,
        "cost": pytest.approx(0.1),
        "max_cost": 1.0,
        "phase": "explore",
    }
