"""How kagent looks in a terminal: the live view of a run, rendered as a terminal would show it."""
from __future__ import annotations

from rich.console import Console

from kagent.agent.budget import FakeClock
from kagent.agent.loop import ViewUpdate
from kagent.agent.views import LiveRunView


def rendered(renderable: object, width: int = 100) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def update(**fields: object) -> ViewUpdate:
    base = dict(phase="explore", turn=1, elapsed_s=2.0, remaining_s=298.0, tokens=0, cost_usd=0.0, best_score=None,
                best_attempt=None)
    return ViewUpdate(**{**base, **fields})


def test_the_live_view_ticks_while_a_long_tool_runs():
    """Nothing reports for 75 s while the baseline runs: the clocks still move, and the view
    says which tool runs, for how long, and how far its evaluation has got."""
    clock = FakeClock()
    view = LiveRunView(clock=clock.now)
    view.update(update(activity="tool baseline", activity_since_s=2.0))
    clock.advance(75)
    text = rendered(view)
    assert "elapsed  1m17s" in text and "remaining  3m43s" in text
    assert "now      tool baseline for 1m15s" in text

    view.update(update(elapsed_s=80.0, remaining_s=220.0, activity="tool baseline", activity_since_s=2.0,
                       detail="reference weights done (3.6 s)"))
    clock.advance(10)
    text = rendered(view)
    assert "elapsed  1m30s" in text and "tool baseline for 1m28s · reference weights done (3.6 s)" in text


def test_the_live_view_stops_its_clocks_when_the_run_has_ended():
    clock = FakeClock()
    view = LiveRunView(clock=clock.now)
    view.update(update(elapsed_s=120.0, remaining_s=180.0, ended=True, last_event="run ended: the model finished"))
    clock.advance(30)
    text = rendered(view)
    assert "elapsed  2m00s" in text and "remaining  3m00s" in text and "now" not in text
