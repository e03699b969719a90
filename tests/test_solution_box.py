"""The red-team cases the solution's box decides (tests/redteam/boxed): each declares, as the
corpus does, what the harness must conclude, and below it, after ``Without a box:``, what it
must conclude where this machine gives the solution no box (containment.probe().solution_box).
They stand apart from the corpus because their verdict depends on the machine."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from test_redteam import CAPS, Case, Expectation, eval_options, expectation

from kagent.sandbox.results import Verdict

from conftest import run_eval

BOXED = Path(__file__).parent / "redteam" / "boxed"
WITHOUT_A_BOX = "Without a box: expect: "


def boxed_expectation(path: Path, boxed: bool) -> Expectation:
    want = expectation(path)
    if boxed:
        return want
    for line in (ast.get_docstring(ast.parse(path.read_text())) or "").splitlines():
        if line.startswith(WITHOUT_A_BOX):
            words = line.removeprefix(WITHOUT_A_BOX).split(" ", 2)
            verdict, check, mentions = (*words, None, None)[:3]
            return dataclasses.replace(want, verdict=Verdict(verdict), check=check, mentions=mentions)
    raise AssertionError(f"{path}: no '{WITHOUT_A_BOX}' line")


def test_each_case_of_the_box_says_both_verdicts():
    cases = sorted(BOXED.glob("*.py"))
    assert len(cases) >= 2
    for path in cases:
        boxed, unboxed = boxed_expectation(path, True), boxed_expectation(path, False)
        assert boxed.verdict is Verdict.PASS and unboxed.verdict is not Verdict.PASS and unboxed.check


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(BOXED.glob("*.py")), ids=lambda p: p.stem)
def test_a_case_of_the_box_gets_its_verdict(path, kimi, kagent_home, tmp_path):
    want = boxed_expectation(path, CAPS.solution_box)
    case = Case(path.stem, path)
    result = run_eval(kimi, case.write(kimi, tmp_path / "solution"), kagent_home, **eval_options(case, want, tmp_path))
    assert result.verdict is want.verdict, result.reason
    if want.verdict is Verdict.PASS and want.score_below is not None:
        assert result.score is not None and result.score < want.score_below, result.reason
    if want.check:
        assert result.reason.startswith(want.check + ":"), result.reason
    if want.mentions:
        assert want.mentions in result.reason, result.reason
