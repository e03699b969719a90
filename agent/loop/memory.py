"""What a compaction keeps: the model's own summary, asked for before the compaction, beside its
notes, the ledger and the current solution.

A mechanical summary (the names of the tools called, a slice of the solution) loses what the
model learned. The long public runs carried "verbatim-critical constraints" across 3 to 16
compactions in summaries the model wrote itself; so before a compaction the model is asked for
one under fixed headings, and the newest one it gave is carried across every later compaction.
"""

from __future__ import annotations

import re
from typing import Optional

HEADINGS = ("Goal", "Design", "Stage timings", "Bugs and causes", "Tried and rejected", "Next steps")
# A summary counts as one when it has at least this many of the headings (a model may merge two).
MIN_HEADINGS = 4
MEMORY_CHARS = 16_000
# The current solution is carried whole up to this share of the context's limit (in characters,
# at 4 a token); a longer one is named with a pointer to read it again.
SOLUTION_SHARE = 0.25

_HEADING = re.compile(r"^\s*#{1,4}\s*(?P<name>[A-Za-z ]+?)\s*:?\s*$", re.MULTILINE)


def request(notes_file: str, solution_name: str) -> str:
    """What the model is asked for before a compaction."""
    headings = "\n".join(f"## {name}" for name in HEADINGS)
    return (
        f"\n[kagent] The conversation will soon be compacted: older turns will be dropped. What stays: the task, "
        f"the ledger, {notes_file}, {solution_name} (whole, or where it is too long, a pointer to read it), and "
        f"a summary you write now. In your next answer (tool calls may come with it), write that summary under "
        f"these headings, with the numbers and the exact constraints you will need:\n{headings}\n"
        f"It is carried word for word across this and later compactions (a newer one replaces it)."
    )


def summary_in(text: str) -> Optional[str]:
    """The structured summary in an answer's text, from its first heading on; None without one."""
    found = [m for m in _HEADING.finditer(text) if m.group("name").strip().lower() in _NAMES]
    if len({m.group("name").strip().lower() for m in found}) < MIN_HEADINGS:
        return None
    summary = text[found[0].start() :].strip()
    if len(summary) > MEMORY_CHARS:
        summary = summary[:MEMORY_CHARS] + f"\n[… {len(summary) - MEMORY_CHARS} characters cut]"
    return summary


_NAMES = {name.lower() for name in HEADINGS}


def solution_text(name: str, text: Optional[str], limit_tokens: int) -> str:
    """The current solution as a compaction carries it: whole where it fits, else a pointer."""
    if text is None:
        return f"There is no {name} yet."
    room = int(SOLUTION_SHARE * limit_tokens * 4)
    lines = text.count("\n") + 1
    if len(text) <= room:
        return f"The current {name} ({lines} lines), whole:\n```\n{text}\n```"
    return (
        f"The current {name} is {lines} lines ({len(text):,} characters), too long to carry here: read it again "
        f"with read_file (it pages through whole lines) before you change it."
    )
