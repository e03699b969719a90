"""A decode task's secret cases: seeds drawn now, which no candidate can know in advance, each
drawn again at a near-tie of the reference's routing, and a chained step judged against the
reference. The referee and the reference workers (workers.py, reference_worker.py) draw and
judge them the same way, from this module."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass

import torch

from .decode_task import Hidden, State, Task, case_inputs, reference_case
from .loading import TaskError
from .step_checker import StepChecker

# A secret case draws seeds until one clears the near-ties; past this many draws for one
# case the task's margin is out of reach.
MAX_DRAWS_PER_CASE = 50


def secret_seed() -> int:
    """A seed drawn now, from the system's randomness: no candidate can know it in advance,
    and none collides with the small public seeds."""
    return 1000 + secrets.randbelow(1 << 30)


@dataclass
class SecretCase:
    """A case drawn now: its seed, where it starts (kept for a salient one), what the
    reference returns, and how many seeds were drawn again at a near-tie before it."""

    seed: int
    inputs: list | None
    expected_hidden: Hidden
    expected_state: State
    margin: float | None
    redrawn: int


def draw_secret_case(task: Task, reference: torch.nn.Module, context_len: int, salient: bool) -> SecretCase:
    """A case from a seed drawn now, which no candidate can know in advance. A seed whose
    expert routing sits on a near-tie is drawn again: there an honest kernel's rounding could
    swap an expert, and a secret seed must not fail a correct solution by bad luck. Run by
    the referee or by a reference worker (workers.py), the same way."""
    screen = task.screening if task.min_margin > 0 else None
    for redrawn in range(MAX_DRAWS_PER_CASE):
        seed = secret_seed()
        try:
            with screen(reference, task.min_margin) if screen is not None else contextlib.nullcontext():
                inputs = case_inputs(task, reference, context_len, seed, salient)
                hidden, state, margin = reference_case(task, reference, *inputs)
        except task.near_tie_error:
            continue  # the routing of a layer sat on a near-tie: the rest of the step is not paid for
        if margin is None or margin >= task.min_margin:
            return SecretCase(seed, inputs if salient else None, hidden, state, margin, redrawn)
    raise TaskError(
        f"no seed with a decision margin of {task.min_margin} in {MAX_DRAWS_PER_CASE} draws: lower "
        "correctness.min_decision_margin"
    )


def judge_chained_step(
    task: Task,
    reference: torch.nn.Module,
    checker: StepChecker,
    hidden_in: Hidden,
    state_in: State,
    hidden: Hidden,
    state: State,
) -> tuple[dict, float | None]:
    """(StepChecker.judge's result, the reference's decision margin) for one step of a
    chained run, against the reference run from the solution's own input and state of that
    step. Run by the referee or by a reference worker, the same way."""
    expected_hidden, expected_state, margin = reference_case(task, reference, hidden_in, state_in)
    return checker.judge(hidden_in, state_in, hidden, state, expected_hidden, expected_state, margin), margin


def secret_case_kinds(task: Task, count: int) -> list[tuple[int, bool]]:
    """(context, salient) of each of ``count`` secret cases: the check contexts in turn, and
    every other round over them from the salient state, so both kinds at every context and
    still one case per seed."""
    contexts = task.check_contexts
    return [
        (contexts[i % len(contexts)], bool(task.salient_state) and (i // len(contexts)) % 2 == 1) for i in range(count)
    ]
