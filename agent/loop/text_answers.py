"""Answers without a tool call. Frontier models send them as a matter of course: a plan at
turn 1, thinking aloud at turn 7, or an end of turn to wait for a background job, as Claude
Code trains them to. Each is answered with a reminder; only ``limit`` of them in a row end the
run, and the reminder says how many remain. An answer that says it waits is answered with the
state of the jobs it waits for."""

from __future__ import annotations

import re

# Words by which an answer says it waits for something running: it gets the jobs' state.
_WAITING = re.compile(
    r"\b(wait(s|ing)?|poll(ing)?|background|in progress|still running|once (it|the job|the build) (is done|"
    r"finishes|ends)|let (it|the job|the build) (run|finish))\b",
    re.IGNORECASE,
)


def says_it_waits(text: str) -> bool:
    return bool(_WAITING.search(text))


class TextAnswers:
    """Answers without a tool call in a row; any call starts the count over."""

    def __init__(self, limit: int):
        self.limit = limit
        self.in_a_row = 0

    @property
    def exhausted(self) -> bool:
        return self.in_a_row >= self.limit

    def answered_with_calls(self) -> None:
        self.in_a_row = 0

    def reminder(self, text: str, under_way: str) -> str:
        """The reply to one more answer without a call (counted here), ``text`` being the
        answer's words and ``under_way`` what the tools still run."""
        self.in_a_row += 1
        left = self.limit - self.in_a_row
        if left <= 0:
            return f"No tool was called, {self.in_a_row} answers in a row: the run ends here."
        count = (
            f"No tool was called ({self.in_a_row} answer{'s' if self.in_a_row > 1 else ''} in a row without one; "
            f"after {left} more in a row the run ends)."
        )
        waiting = ""
        if says_it_waits(text):
            waiting = (
                f" You seem to be waiting: nothing runs between your turns unless you call a tool. The jobs now:\n"
                f"{under_way}\n`jobs` with action=wait blocks until a job ends (or timeout_s passes)."
                if under_way
                else " You seem to be waiting, but no background job is running: nothing happens until you call a tool."
            )
        return (
            f"{count}{waiting} Keep working with the tools (design, write_file, check, benchmark, jobs, ...), "
            f"or call finish if you are done; a plan is best kept in notes.md."
        )
