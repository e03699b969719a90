"""How kagent looks in a terminal: the live view of a run, rendered as a terminal would show it."""

from __future__ import annotations

from rich.console import Console

from kagent.agent.cli.views import LiveRunView, result_view, run_panel
from kagent.agent.loop.agent import ViewUpdate
from kagent.agent.loop.budget import FakeClock
from kagent.agent.loop.ledger import Attempt
from kagent.sandbox.results import CheckResult, EvalResult, ShapeTiming, Stats, Verdict


def rendered(renderable: object, width: int = 100) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def update(**fields: object) -> ViewUpdate:
    base = dict(
        phase="explore",
        turn=1,
        elapsed_s=2.0,
        remaining_s=298.0,
        tokens=0,
        cost_usd=0.0,
        best_score=None,
        best_attempt=None,
    )
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

    view.update(
        update(
            elapsed_s=80.0,
            remaining_s=220.0,
            activity="tool baseline",
            activity_since_s=2.0,
            detail="reference weights done (3.6 s)",
        )
    )
    clock.advance(10)
    text = rendered(view)
    assert "elapsed  1m30s" in text and "tool baseline for 1m28s · reference weights done (3.6 s)" in text


def test_the_live_view_stops_its_clocks_when_the_run_has_ended_and_shows_the_result():
    clock = FakeClock()
    view = LiveRunView(clock=clock.now)
    view.update(
        update(
            elapsed_s=120.0,
            remaining_s=180.0,
            ended=True,
            last_event="run ended: the model finished",
            best_score=1.074,
            best_attempt=2,
            final_score=0.94,
        )
    )
    clock.advance(30)
    text = rendered(view)
    assert "elapsed  2m00s" in text and "remaining  3m00s" in text and "now" not in text
    assert "best     1.074x (attempt 2) · re-verified 0.940x: the result" in text


def test_the_live_views_best_line_carries_the_best_attempts_interval():
    best = Attempt(
        number=2, kind="benchmark", verdict="pass", reason="", score=1.074, interval=(0.98, 1.2), commit="c", kept=True
    )
    view = LiveRunView(clock=FakeClock().now)
    view.update(update(best_score=1.074, best_attempt=2, attempts=[best]))
    assert "best     1.074x [0.980–1.200], within noise (attempt 2)" in rendered(view)


def timing(label: str, speedup: float, low: float, high: float) -> ShapeTiming:
    stats = Stats(n=8, median_ms=1.0, mean_ms=1.0, p10_ms=0.9, p90_ms=1.1, iqr_ms=0.1, min_ms=0.8, max_ms=1.2)
    return ShapeTiming(
        label=label,
        steps=8,
        rounds=2,
        baseline=stats,
        candidate=stats,
        speedup=speedup,
        ratio_of_medians=speedup,
        ci_low=low,
        ci_high=high,
        within_noise=low <= 1 <= high,
    )


def aa_result(*timings: ShapeTiming, score: float) -> EvalResult:
    return EvalResult(
        task="02_kimi_linear_decode",
        task_kind="mega",
        mode="aa",
        scale="smoke",
        device="cpu",
        verdict=Verdict.PASS,
        reason="all checks passed",
        started_at="2026-12-01T00:00:00+00:00",
        wall_seconds=165.0,
        timings=list(timings),
        score=score,
    )


def test_an_aa_score_within_noise_is_marked_and_a_noisy_one_said_plainly():
    """The A/A run that printed `score: 1.218x` unmarked under a row `1.408x ≈`: the score is
    within noise too, and an interval that wide means nothing."""
    noisy = aa_result(timing("ctx 2048", 1.408, 0.71, 2.10), timing("ctx 8192", 1.054, 1.01, 1.10), score=1.218)
    text = rendered(result_view(noisy), width=200)
    assert "score (geomean speedup): 1.218x ≈ (within noise: interval 0.85–1.52)" in text
    assert "too noisy to mean anything (the score, ctx 2048): a 95% interval wider than ±25%" in text

    quiet = aa_result(timing("ctx 2048", 1.003, 0.98, 1.02), timing("ctx 8192", 0.997, 0.97, 1.03), score=1.0)
    text = rendered(result_view(quiet), width=200)
    assert "score (geomean speedup): 1.000x ≈ (within noise: interval 0.97–1.02)" in text
    assert "too noisy" not in text

    faster = aa_result(timing("ctx 2048", 1.50, 1.40, 1.60), score=1.5)
    text = rendered(result_view(faster), width=200)
    assert "score (geomean speedup): 1.500x\n" in text and "too noisy" not in text


def test_the_model_reads_the_same_noise_marks_as_a_person():
    """The benchmark tool's result tells the model what `kagent eval` tells a person, with what
    to do about it."""
    from kagent.tools.evaluation import summarize

    noisy = aa_result(timing("ctx 2048", 1.408, 0.71, 2.10), timing("ctx 8192", 1.054, 1.01, 1.10), score=1.218)
    text = summarize(noisy)
    assert "score (geomean speedup): 1.218x ≈ (within noise: interval 0.85–1.52)" in text
    assert (
        "too noisy to mean anything (the score, ctx 2048): a 95% interval wider than ±25%; "
        "benchmark again before acting on it"
    ) in text
    assert "too noisy" not in summarize(aa_result(timing("ctx 2048", 1.50, 1.40, 1.60), score=1.5))


def test_every_check_status_shows_in_the_checks_table():
    # A crash and a step the watchdog found hung showed no table: their status had no colour.
    checks = [
        CheckResult(name="load", status="pass", reason="imported"),
        CheckResult(name="fixed_seeds", status="timeout", reason="hung: no answer for 60 s while running a step"),
        CheckResult(name="hidden_seeds", status="crash", reason="the solution's process died"),
    ]
    result = EvalResult(
        task="02_kimi_linear_decode",
        task_kind="mega",
        mode="check",
        scale="smoke",
        device="cpu",
        verdict=Verdict.TIMEOUT,
        reason="fixed_seeds: hung",
        started_at="2026-12-01T00:00:00+00:00",
        wall_seconds=70.0,
        checks=checks,
    )
    text = rendered(result_view(result), width=200)
    assert "TIMEOUT" in text and "hung: no answer for 60 s" in text and "crash" in text


def test_what_sharing_the_device_cost_is_shown_beside_the_result():
    """Under a sweep's lease: the holds with the device alone and their waits, and the probes
    read busy beside other members' work; nothing of it without a lease."""
    from kagent.sandbox.lease import LeaseRecord

    def hold(what: str, requested: float, acquired: float) -> LeaseRecord:
        return LeaseRecord(
            lease="node-gpu0",
            holder="m01",
            host="node",
            pid=7,
            kind="exclusive",
            what=what,
            requested_at=requested,
            acquired_at=acquired,
            released_at=acquired + 1,
        )

    asked = [
        {"what": "running a step", "first_ms": 4.5, "again_ms": 0.4, "alone": False},
        {"what": "running a step", "first_ms": 3.1, "again_ms": 0.3, "alone": True},
    ]
    checks = [
        CheckResult(name="load", status="pass", reason="loaded"),
        CheckResult(name="fixed_seeds", status="pass", reason="all seeds", data={"probes_asked_again": asked}),
    ]
    shared = aa_result(timing("ctx 2048", 1.0, 0.99, 1.01), score=1.0).model_copy(
        update={
            "checks": checks,
            "gpu_leases": [
                hold("calibrating the requests' floor and the device probe", 0.0, 1.5),
                hold("confirming an idle device after running a step", 10.0, 14.0),
                hold("timing", 20.0, 20.5),
            ],
        }
    )
    text = rendered(result_view(shared), width=300)
    assert (
        "device lease: held alone 3 times (calibrating the requests' floor and the device probe, confirming an "
        "idle device after running a step, timing) after waiting 6.0 s in all; 2 probes read busy beside other "
        "evaluations' work were read again (1 of them with the device alone)"
    ) in text
    assert "device lease" not in rendered(result_view(aa_result(timing("ctx 2048", 1.0, 0.99, 1.01), score=1.0)))


def test_a_host_overhead_below_zero_is_said_as_noise_not_printed_negative():
    """One benchmark printed "host overhead -14.9 ms over the steady time": a step alone can
    read faster than the steady pace only by the measurements' noise."""
    slower_alone = timing("ctx 16", 1.0, 0.9, 1.1).model_copy(update={"candidate_isolated_ms": 1.25})
    faster_alone = timing("ctx 16", 1.0, 0.9, 1.1).model_copy(update={"candidate_isolated_ms": 0.8})
    assert slower_alone.candidate.median_ms == 1.0
    text = rendered(result_view(aa_result(slower_alone, score=1.0)), width=200)
    assert "one step on its own takes 1.25 ms (host overhead 0.25 ms over the steady time)" in text
    text = rendered(result_view(aa_result(faster_alone, score=1.0)), width=200)
    assert "host overhead -" not in text
    assert (
        "one step on its own takes 0.800 ms (no host overhead to see: it read 0.2 ms under the steady time "
        "1.00 ms, within the two measurements' noise)"
    ) in text


def test_a_cut_note_ends_at_a_word_with_an_ellipsis():
    """A ledger note in the live view's 60 characters read "... worst: seed 1 c"."""
    from kagent.agent.report.trace_reading import shorten

    note = "incorrect: max abs error 0.31 at ctx 16 (tolerance 0.01); worst: seed 1 case 3 of 4"
    assert shorten(note, 60) == "incorrect: max abs error 0.31 at ctx 16 (tolerance 0.01)…"
    assert shorten("a" * 80, 60) == "a" * 59 + "…"  # no word boundary to cut at: cut where it must
    assert shorten(note, 200) == note
    attempt = Attempt(number=1, kind="check", verdict="incorrect", reason=note, commit="c" * 40, kept=False)
    text = rendered(run_panel(update(attempts=[attempt])))
    assert "(tolerance 0.01)…" in text and "seed 1 c" not in text


def test_runs_shows_the_result_with_its_interval_and_says_when_it_holds_one(tmp_path):
    """`kagent runs` said 0.830x where the page said 0.830x [0.744–1.086]: the same code scored
    0.830x to 1.071x over seven demo runs."""
    from kagent.agent.report.run_list import RunSummary, runs_table

    noisy = RunSummary(
        run_id="r1", state="finished", result_score=0.83, result_interval=(0.744, 1.086), best_attempt=2, path=tmp_path
    )
    faster = RunSummary(
        run_id="r2", state="finished", result_score=1.5, result_interval=(1.4, 1.6), best_attempt=3, path=tmp_path
    )
    older = RunSummary(run_id="r3", state="finished", result_score=1.2, best_attempt=1, path=tmp_path)
    text = rendered(runs_table([noisy, faster, older], "Runs"), width=250)
    assert "0.830x [0.744–1.086], within noise #2" in text
    assert "1.500x [1.400–1.600] #3" in text and "1.200x #1" in text  # a run from before intervals: none


def test_a_result_cut_in_replay_counts_its_lines_in_good_english():
    from kagent.agent.cli.replay import MAX_RESULT_LINES, TraceRenderer
    from kagent.agent.storage.trace import ToolFinished

    def shown(lines: int) -> str:
        content = "\n".join(f"line {n}" for n in range(lines))
        event = ToolFinished(turn=1, call_id="c", name="shell", content=content, is_error=False, seconds=0.0)
        return rendered(TraceRenderer._result_view(event))

    assert "… 1 more line\n" in shown(MAX_RESULT_LINES + 1)  # it said "1 more lines"
    assert "… 2 more lines" in shown(MAX_RESULT_LINES + 2)


def test_the_model_reads_no_negative_host_overhead_either():
    """The evaluation's summary the model reads (tools/evaluation.py) words the figure as the
    views do: one place, ShapeTiming.host_overhead_text."""
    from kagent.tools.evaluation import summarize

    faster_alone = timing("ctx 16", 1.0, 0.9, 1.1).model_copy(update={"candidate_isolated_ms": 0.8})
    text = summarize(aa_result(faster_alone, score=1.0))
    assert "host overhead -" not in text
    assert "no host overhead to see: it read 0.2 ms under the steady time 1.00 ms" in text
