"""The project's history stays scannable: every commit subject since the tree was formatted
(c2bd330, when issue 43 set the rule) is at most 72 characters, in the form `area: what changed`.
Two commits that landed before this test existed are the known exceptions."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RULE_FROM = "c2bd330dc2b84a598633446cbd55c52c93345e78"
MAX_SUBJECT = 72
# Landed over the limit (73 and 75 characters) before a test held it; history is not rewritten.
LANDED_LONG = {"4a2fcd34a6af195e6af006a53ca38a90caa30c5f", "13a9af4e42c3c5ffba0c9928a2e206a0991bc9ad"}
AREA = re.compile(r"^[\w./ -]+: \S")


def subjects_since(commit: str) -> list[tuple[str, str]]:
    """(full hash, subject) of every commit after ``commit`` up to HEAD; a skip where the
    checkout has no such history (a shallow clone, a tarball)."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "log", "--format=%H %s", f"{commit}..HEAD"], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"no git history to read here: {done.stderr.strip()[:200]}")
    return [(sha, subject) for sha, _, subject in (line.partition(" ") for line in done.stdout.splitlines() if line)]


def too_long(subjects: list[tuple[str, str]]) -> list[str]:
    return [
        f"{sha[:9]} ({len(subject)}): {subject}"
        for sha, subject in subjects
        if len(subject) > MAX_SUBJECT and sha not in LANDED_LONG
    ]


def test_commit_subjects_since_the_formatter_are_short_and_name_their_area():
    subjects = subjects_since(RULE_FROM)
    assert subjects, "the formatter's commit is HEAD itself"
    assert not too_long(subjects), "commit subjects over 72 characters:\n" + "\n".join(too_long(subjects))
    unnamed = [f"{sha[:9]}: {subject}" for sha, subject in subjects if not AREA.match(subject)]
    assert not unnamed, "subjects not in the form `area: what changed`:\n" + "\n".join(unnamed)


def test_the_rule_catches_a_long_subject():
    assert too_long([("f" * 40, "x" * 73)]) == [f"{'f' * 9} (73): {'x' * 73}"]
    assert too_long([("f" * 40, "x" * 72), (sorted(LANDED_LONG)[0], "y" * 75)]) == []
