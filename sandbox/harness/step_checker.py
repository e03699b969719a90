"""The step checker: whether one step of a solution matches the reference's, tensor by tensor,
with a tolerance from each dtype's rounding, and a failure told as the one reason the model can
act on (which output differs first, by how much, at which case, near which tie)."""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from typing import Any

import torch

from . import compare
from .decode_task import Hidden, Layout, State, Task, reference_case, reference_step
from .exchange import Layout as TensorLayout


def grown(layout: Layout, growth: list[dict[str, tuple[int, ...]]], steps: int) -> Layout:
    """The layout after ``steps`` more steps, each adding ``growth`` (the MLA cache's row)."""
    return [
        {
            name: TensorLayout(
                tuple(d + steps * g for d, g in zip(want.shape, layer_growth[name], strict=False)), want.dtype
            )
            for name, want in layer.items()
        }
        for layer, layer_growth in zip(layout, growth, strict=False)
    ]


# How far a step's contribution must stand above the rounding of the hidden it is added to
# before its cosine is judged: at 20x, rounding alone costs the cosine about 0.001.
DELTA_SIGNAL_OVER_ROUNDING = 20.0


def _precision(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


class StepChecker:
    """Compares what a candidate's step returned (copied into the referee's tensors) with
    the reference."""

    def __init__(self, task: Task, reference: torch.nn.Module):
        self.task = task
        self.reference = reference

    def compare(
        self,
        hidden_in: Hidden,
        state_in: State,
        hidden: Hidden,
        state: State,
        expected_hidden: Hidden,
        expected_state: State,
    ) -> dict:
        """Cosine of the next hidden, of the step's own contribution (out - in), of every
        state tensor, and of the rows a step appends to a growing one. The delta matters on
        chained steps: there the residual stream is a running sum that dominates the hidden,
        so skipped work can hide in its cosine. The appended rows matter for the same reason:
        one new row of a cache thousands of rows long moves the cache's cosine by less than
        rounding, and a wrong one shows only in later steps.

        The delta is judged only where it stands clear of the output's own rounding: a hidden
        stored in bf16 carries an error of up to half its precision, and where the step adds
        little to a large residual (a salient state can make it so) that error alone takes the
        delta's cosine below any threshold, for the reference's own baseline too (H200,
        the baseline at 0.9799 on one secret case of 48)."""
        metrics: dict[str, float] = {}
        nonfinite = []
        tensors = [("hidden", hidden, expected_hidden)]
        for i, (layer, ref_layer, in_layer) in enumerate(zip(state, expected_state, state_in, strict=False)):
            for name, ref in ref_layer.items():
                tensors.append((f"L{i}.{name}", layer[name], ref))
                rows_in = in_layer[name].shape[0] if in_layer[name].dim() else 0
                if ref.dim() and ref.shape[0] > rows_in and ref.shape[1:] == in_layer[name].shape[1:]:
                    tensors.append((f"L{i}.{name}.appended", layer[name][rows_in:], ref[rows_in:]))
        for name, got, ref in tensors:
            if not compare.is_finite(got):
                nonfinite.append(name)
            metrics[name] = compare.cosine(got, ref)
        base = hidden_in.float()
        expected_delta = expected_hidden.float() - base
        rounding = expected_hidden.float().norm() * (_precision(expected_hidden.dtype) / 2)
        if expected_delta.norm() >= DELTA_SIGNAL_OVER_ROUNDING * rounding:
            metrics["delta"] = compare.cosine(hidden.float() - base, expected_delta)
        worst = min(metrics, key=lambda name: metrics[name])
        below = sorted(n for n, v in metrics.items() if v < self.task.threshold)
        return {
            "min_cosine": metrics[worst],
            "worst": worst,
            "below_threshold": below,
            "nonfinite": nonfinite,
            "cosines": {k: round(v, 6) for k, v in metrics.items()},
            "passed": not below and not nonfinite,
        }

    def near_tie(self, margin: float | None) -> bool:
        return margin is not None and margin < self.task.min_margin

    def explainable(self, margin: float | None) -> bool:
        """Whether a decision this close to a tie may have been tipped by rounding."""
        return margin is not None and margin < self.task.explained_margin

    def judge(
        self,
        hidden_in: Hidden,
        state_in: State,
        hidden: Hidden,
        state: State,
        expected_hidden: Hidden,
        expected_state: State,
        margin: float | None,
    ) -> dict:
        """compare; and where the step fails close to a tie of the reference's routing (its
        decision margin ``margin`` below the task's explained margin), the comparison with the
        reference that took the runner-up there, if that one matches: the mismatch rounding
        explains, marked ``excused``. Any other mismatch fails, near a tie or not."""
        result = self.compare(hidden_in, state_in, hidden, state, expected_hidden, expected_state)
        if result["passed"] or result["nonfinite"] or not self.explainable(margin):
            return result
        matched, beyond_rounding = self._runner_up_match(hidden_in, state_in, hidden, state)
        if matched is not None:
            return matched[0]
        return {**result, "beyond_rounding": beyond_rounding} if beyond_rounding else result

    def judge_timed(self, hidden_in: Hidden, state_in: State, hidden: Hidden) -> tuple[dict, State]:
        """One step of a timed chain, of which only the hidden was recorded: judged as
        ``judge`` judges a step, against the reference run from ``hidden_in`` (the chain's own
        previous output) and ``state_in``; and the state the chain's next step is judged from:
        the reference's after this step, or where the runner-up explains the step, that
        reference's. So every step is judged from the very hiddens the chain fed itself, with
        the state those hiddens make, and a tie that rounding tipped is followed down the
        branch the chain took: nothing after it is waived."""
        expected_hidden, expected_state, margin = reference_case(self.task, self.reference, hidden_in, state_in)
        result = self.compare(hidden_in, state_in, hidden, [], expected_hidden, [])
        if not (result["passed"] or result["nonfinite"]) and self.explainable(margin):
            matched, beyond_rounding = self._runner_up_match(hidden_in, state_in, hidden, [])
            if matched is not None:
                result, expected_state = matched
            elif beyond_rounding:
                result = {**result, "beyond_rounding": beyond_rounding}
        return {**result, "decision_margin": margin}, expected_state

    def _runner_up_match(
        self, hidden_in: Hidden, state_in: State, hidden: Hidden, state: State
    ) -> tuple[tuple[dict, State] | None, dict | None]:
        """The comparison with the reference run from the same inputs but with the runner-up
        taken at decisions close enough to a tie that rounding explains a swap, and that
        reference's state: each such decision alone (the closest first), then each two of
        them (two layers on near-ties in one step, which the bf16 baseline swapped both of at
        smoke scale), for the first where the step matches; None where none does, or the task
        has no way to ask. Beside it, where no decision was close enough but one was under the
        explained margin, the closest such (its margin and rounding bound), for the reason to
        say that rounding cannot have tipped it.

        Close enough: below the task's max_explained_margin, and where the task says what
        rounding its decision's inputs to bf16 can move (decision_rounding), below that too."""
        task, model = self.task, self.reference
        if task.decision_margins is None or task.runner_up is None:
            return None, None
        reference_step(model, hidden_in, state_in)  # the margins of this very step, decision by decision
        margins = [float(m) for m in task.decision_margins(model)]
        bounds = [float(b) for b in task.decision_rounding(model)] if task.decision_rounding else None
        close = sorted(
            (d for d, m in enumerate(margins) if self.explainable(m) and (bounds is None or m < bounds[d])),
            key=lambda d: margins[d],
        )
        for taken in [*((d,) for d in close), *itertools.combinations(close, 2)]:
            with contextlib.ExitStack() as stack:
                for decision in taken:
                    stack.enter_context(task.runner_up(model, decision))
                expected_hidden, expected_state = reference_step(model, hidden_in, state_in)
            result = self.compare(hidden_in, state_in, hidden, state, expected_hidden, expected_state)
            if result["passed"]:
                excused: dict[str, Any] = {"decision": taken[0], "margin": margins[taken[0]]}
                if len(taken) > 1:
                    excused["decisions"] = [{"decision": d, "margin": margins[d]} for d in taken]
                if bounds is not None:
                    excused["rounding_bound"] = bounds[taken[0]]
                return ({**result, "excused": excused}, expected_state), None
        beyond = [d for d, m in enumerate(margins) if self.explainable(m) and d not in close]
        if not beyond or bounds is None:
            return None, None
        closest = min(beyond, key=lambda d: margins[d])
        return None, {
            "decision": closest,
            "margin": margins[closest],
            "rounding_bound": bounds[closest],
            "runner_up_tried": bool(close),  # at other decisions, close enough
        }


def named_outputs(hidden: Hidden, state: State) -> dict[str, torch.Tensor]:
    """A step's output tensors by the names StepChecker reports them under."""
    named = {"hidden": hidden}
    for i, layer in enumerate(state):
        named.update({f"L{i}.{name}": tensor for name, tensor in layer.items()})
    return named


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference; infinite where a NaN makes it undefined."""
    found = compare.max_abs_diff(a, b)
    return math.inf if math.isnan(found) else found


def case_label(seed: str, context_len: int, salient: bool) -> str:
    """A secret case's name in a check's reason ("seed 0 ctx 16", "hidden seed #3 ctx 2048 salient state")."""
    return f"{seed} ctx {context_len}" + (" salient state" if salient else "")


def fail_reason(
    label: str, result: dict, threshold: float, margin: float | None = None, explained_margin: float = 0.0
) -> str:
    """Why the case ``label`` failed, from StepChecker's ``result``: the outputs below ``threshold``,
    the earliest layer among them, and whether a routing tie (``margin``) could explain it."""
    if result["nonfinite"]:
        return f"{label}: non-finite values in {', '.join(result['nonfinite'][:5])}"
    below = result["below_threshold"]
    names = ", ".join(f"{n} {result['cosines'][n]:.4f}" for n in below[:6])
    reason = f"{label}: cosine below {threshold} for {names}"
    first = _first_to_differ(below)
    if first is not None:
        reason += (
            f"; the earliest layer whose state differs: {first} (look first at what the step computes "
            "before it, in that layer or the one before)"
        )
    elif any(re.fullmatch(r"L\d+\..+", name) for name in result["cosines"]):
        reason += (
            f"; every layer's state agrees with the reference (cosine >= {threshold}): only the step's output differs"
        )
    beyond = result.get("beyond_rounding")
    if margin is not None and margin < explained_margin:
        # Said only to rule a tie out: the reference that took the runner-up was tried and does
        # not match either, or the decision is further from a tie than rounding can move it, so
        # rounding at the tie does not explain this (where it does, the case is excused and
        # passes). A hint towards the router here sent a dropped multiply astray.
        said = []
        if beyond is None or beyond["runner_up_tried"]:
            said.append(
                f"the reference's routing is {margin:.2%} from a tie here, but the step does not match the "
                "reference that took the runner-up either"
            )
        if beyond is not None:
            said.append(
                f"at decision {beyond['decision']} it is {beyond['margin']:.2%} from a tie, more than rounding its "
                f"inputs to bf16 can move there ({beyond['rounding_bound']:.2%}), so no runner-up is excused there"
            )
        reason += f" ({'; '.join(said)}: a routing tie does not explain this mismatch)"
    return reason


def _first_to_differ(names: list[str]) -> str | None:
    """Of the outputs below the threshold, the state of the earliest layer (named L<i>.<name>)."""
    layered = [(int(n[1 : n.index(".")]), n) for n in names if re.fullmatch(r"L\d+\..+", n)]
    return min(layered)[1] if layered else None


def near_tie_note(results: list[dict], min_margin: float) -> str:
    """What a passing group's reason says of its cases at a near-tie of the reference's
    routing, and of those further from one that the runner-up explains."""

    def named(rows: list[dict]) -> str:
        return ", ".join(
            f"{r['case']} ({r['decision_margin']:.2%}"
            + (", matches the reference that took the runner-up" if "excused" in r else "")
            + ")"
            for r in rows
        )

    near = [r for r in results if r["near_tie"]]
    tipped = [r for r in results if "excused" in r and not r["near_tie"]]
    note = f"; at a near-tie of the reference's routing (margin below {min_margin:.0%}): {named(near)}" if near else ""
    if tipped:
        note += (
            f"; matching the reference that took the runner-up, where its routing was close to a tie: {named(tipped)}"
        )
    return note
