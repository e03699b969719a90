"""How a run ends: the state it ends in and the exit code that tells a script, in one table.

The loop, status.json, the trace, `kagent runs`, the exit code of `kagent run` and `kagent
resume`, their --help and the README all read this table, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kagent.core.errors import EXIT_USAGE
from kagent.sandbox.results import EvalResult, Verdict

# The model sent the same tool call, with the same arguments, and it failed this many times
# in a row: the run ends (see RunConfig.max_repeated_failures).
REPEATED_FAILURE_LIMIT = 5

EndState = Literal["finished", "no_result", "stopped", "stuck", "failed", "interrupted"]
RunState = Literal["running", EndState]
# What ended the exploring, as the loop sees it; with whether a verified result stands, it
# decides the state (see end_state).
Cause = Literal["model", "budget", "stuck", "error", "unavailable"]

# Exit codes outside the table: bad usage before a run starts (EXIT_USAGE), and Ctrl-C or a
# stopping signal, each 128 and the signal's number, as a shell reports a death by it.
EXIT_CTRL_C = 130
EXIT_INTERRUPTED = {"Ctrl-C": EXIT_CTRL_C, "SIGTERM": 143, "SIGHUP": 129}


@dataclass(frozen=True)
class Ending:
    exit_code: int
    meaning: str
    style: str  # how `kagent runs` and `kagent replay` colour it


ENDINGS: dict[str, Ending] = {
    "finished": Ending(
        0,
        "a verified result is in place: the best attempt passed its final re-verification "
        "(or its benchmark, once its re-verification passed the secret inputs)",
        "green",
    ),
    "failed": Ending(1, "an error ended the run, such as a model provider refusing for good", "red"),
    "no_result": Ending(
        3,
        "the model finished with no verified result: no attempt passed a benchmark, or the "
        "best one failed its re-verification",
        "yellow",
    ),
    "stopped": Ending(
        4, "the wall-clock budget, --max-cost or --max-tokens ran out before any verified result", "yellow"
    ),
    "stuck": Ending(
        5,
        f"the model sent the same failing tool call {REPEATED_FAILURE_LIMIT} times in a row, and the run was ended",
        "red",
    ),
    "interrupted": Ending(
        6, "the model provider stayed unavailable through every retry; `kagent resume` goes on", "yellow"
    ),
}


def end_state(cause: Cause, verified: bool) -> EndState:
    """The state a run ends in. An error, a stuck model or an outage is said whatever the
    result; a run that ended as it should (the model finished, the budget ran out) is
    finished only with a verified result in place."""
    if cause == "error":
        return "failed"
    if cause == "unavailable":
        return "interrupted"
    if cause == "stuck":
        return "stuck"
    if verified:
        return "finished"
    return "no_result" if cause == "model" else "stopped"


def exit_codes_text() -> str:
    """The exit codes as --help shows them, one per line."""
    lines = [(ending.exit_code, f"{state}: {ending.meaning}") for state, ending in ENDINGS.items()]
    lines += [
        (EXIT_USAGE, "bad usage: nothing was started"),
        (
            EXIT_CTRL_C,
            "interrupted by Ctrl-C (by SIGTERM: 143, by SIGHUP: 129), its figures kept; `kagent resume` goes on",
        ),
    ]
    return "\n".join(f"{code} {text}." for code, text in sorted(lines))


# The verdicts of a final re-verification that stopped short rather than judged: its time ran
# out, or the harness failed.
STOPPED_SHORT = frozenset({Verdict.TIMEOUT, Verdict.INTERNAL_ERROR})


def reverification_inconclusive(result: EvalResult) -> bool:
    """A final re-verification that stopped short says nothing against the best attempt (the
    benchmark that made it the best stands) only once its secret inputs had passed: they are
    what it adds to that benchmark (twice as many). One that stopped before them verified
    nothing new, and a solution could stall there on purpose to keep a score its larger draw
    would refute."""
    return result.verdict in STOPPED_SHORT and any(
        c.name == "hidden_seeds" and c.status == "pass" for c in result.checks
    )


def reverification_note(result: EvalResult) -> str:
    """What the final re-verification came to, as the trace's Finalized note says it: a timeout
    (a GPU shared with a sweep's other members can slow a full evaluation past what is left) is
    neither a confirmation nor a refutation, and the note must not read "re-verified"."""
    if result.verdict is Verdict.PASS:
        return "re-verified"
    if reverification_inconclusive(result):
        return (
            f"re-verification inconclusive ({result.verdict.value}: {result.reason[:200]}); "
            f"the best attempt's benchmark stands"
        )
    if result.verdict in STOPPED_SHORT:
        return (
            f"re-verification stopped before its secret inputs passed ({result.verdict.value}: "
            f"{result.reason[:200]}); no verified result"
        )
    return f"failed its re-verification ({result.verdict.value})"
