"""Evaluation of a KernelBench-Mega-style task: a stateful ``Model.step(hidden, state)``.

The order matters for integrity: the reference's weights, the fixed seeds' expected outputs
and the bandwidth are built, the baseline's process and the reference workers have loaded
everything they read, and the cache is sealed, before the solution's process is told to load
the solution. The secret cases (seeds drawn now, which no candidate can know in advance) are
drawn by the workers while it loads, and all of them are in before its first step. That
process (remote.py) only ever receives inputs and returns outputs through the shared arena;
everything it returns is copied into the referee's own tensors and judged here (or by a
worker, on tensors the referee hands it), never while the solution's process runs.
"""
# Longer than 600 lines: one kind's evaluation in the order its integrity rests on (above),
# with the chains it validates and times; split, that order would be harder to follow.

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import building, compare, lease, timing
from .base import EvaluationBase, arena_bytes_for
from .decode_task import (
    Case,
    Hidden,
    Layout,
    State,
    Task,
    build_reference,
    case_inputs,
    layout_of,
    reference_case,
    reference_step,
)
from .exchange import Layout as TensorLayout
from .loading import CandidateError, TaskError, digest
from .secret_cases import draw_secret_case, judge_chained_step, secret_case_kinds, secret_seed
from .step_checker import StepChecker, case_label, fail_reason, grown, max_abs_difference, named_outputs, near_tie_note


# Longer than 300 lines: its methods are the evaluation's phases, in the order its integrity
# needs (the module's docstring); spread over classes, that one order would be harder to check.
class MegaEvaluation(EvaluationBase):
    """One evaluation of a solution (or, in A/A mode, of the baseline against itself)."""

    # -- everything trusted happens before the solution's process loads anything ---------------
    def prepare(self) -> None:
        self.task = Task(Path(self.job.task), self.job.scale, self.device)
        task = self.task
        wanted = self.job.contexts
        self.timing_shapes = [s for s in task.shapes if not wanted or s["context_len"] in wanted]
        if not self.timing_shapes:
            known = [s["context_len"] for s in task.shapes]
            raise TaskError(f"no shape with context in {wanted}; this scale has contexts {known}")
        # Where the validated chains start: a seed of this evaluation's own, as secret as the
        # hidden seeds (each timed chain draws one of its own, ChainContestant).
        self.timing_seed = secret_seed()
        self.phase("load_task")
        if self.device.type == "cuda":
            # This process's device context, timed apart from the weights: it is made while
            # the evaluation's other processes make theirs.
            torch.empty(1, device=self.device)
        self.phase("device_context")
        with torch.no_grad():
            # The baseline's process and the workers load the weights file the moment it is
            # known good, beside the referee's own load and its fixed cases.
            self.reference, self.weights_entry = build_reference(
                task, self.cache, self._weights_file_found, lambda: self.phase("reference_weights_read")
            )
            self.phase("reference_weights")
            self.cases = self._fixed_cases()
        first = self.cases[0]
        before = layout_of(task.init_state(first.context_len, first.seed))
        after = layout_of(first.expected_state)
        self.growth = [
            {
                name: tuple(a - b for a, b in zip(after[i][name].shape, want.shape, strict=False))
                for name, want in layer.items()
            }
            for i, layer in enumerate(before)
        ]
        self.hidden_layout = TensorLayout.of(first.expected_hidden)
        self.checker = StepChecker(task, self.reference)
        self.phase("reference_outputs")

    def _weights_file_found(self, path: Path) -> None:
        """The cache's weights file is known good (hashed against its record, or just written):
        the other trusted processes start loading it beside the referee."""
        self.phase("weights_file")
        self.begin_trusted(str(path), [self.task.cfg])

    def _fixed_cases(self) -> list[Case]:
        """Each fixed seed from init_state's draw (the public board's case) and, where the
        reference can make one, from its salient state too; cached."""
        task, cases = self.task, []
        kinds = (False, True) if task.salient_state else (False,)
        for context_len in task.check_contexts:
            for seed in task.check_seeds:
                for salient in kinds:
                    key = digest(task.cache_identity, "case", context_len, seed, *(["salient"] if salient else []))
                    inputs = self.case_inputs(context_len, seed, True) if salient else None
                    # get_or_build calls the builder at once, in this turn of the loop.
                    out = self.cache.get_or_build(
                        "outputs",
                        key,
                        self.device,
                        lambda: reference_case(
                            task,
                            self.reference,
                            *(inputs or self.case_inputs(context_len, seed, False)),  # noqa: B023
                        ),
                    )
                    expected_hidden, expected_state, margin = out
                    cases.append(
                        Case(
                            case_label(f"seed {seed}", context_len, salient),
                            context_len,
                            seed,
                            expected_hidden,
                            expected_state,
                            margin,
                            salient=salient,
                            inputs=inputs,
                        )
                    )
        return cases

    def _secret_cases(self) -> None:
        """Cases from seeds drawn now (draw_secret_case), by the reference workers where there
        are any, else here; told afterwards (``hidden_seeds``)."""
        kinds = secret_case_kinds(self.task, self.job.hidden_seeds)
        if self.workers is not None:
            drawn = self.workers.secret_cases(kinds)
        else:
            drawn = [
                draw_secret_case(self.task, self.reference, context_len, salient) for context_len, salient in kinds
            ]
        self.hidden_seeds = [case.seed for case in drawn]
        self.redrawn_seeds = sum(case.redrawn for case in drawn)
        for i, ((context_len, salient), case) in enumerate(zip(kinds, drawn, strict=True)):
            self.cases.append(
                Case(
                    case_label(f"hidden seed #{i + 1}", context_len, salient),
                    context_len,
                    case.seed,
                    case.expected_hidden,
                    case.expected_state,
                    case.margin,
                    salient=salient,
                    inputs=case.inputs,
                )
            )

    def judge_step(self, hidden_in: Hidden, state_in: State, hidden: Hidden, state: State):
        """``judge_chained_step`` of one step, by a reference worker where there are any
        (later: a function that waits for it), else here; call the result for (result,
        decision margin)."""
        if self.workers is not None:
            return self.workers.judge([hidden_in, state_in, hidden, state])
        done = judge_chained_step(self.task, self.reference, self.checker, hidden_in, state_in, hidden, state)
        return lambda: done

    def inputs_of(self, case: Case) -> list:
        """The (hidden, state) ``case`` starts from."""
        return case.inputs if case.inputs is not None else self.case_inputs(case.context_len, case.seed, False)

    def case_inputs(self, context_len: int, seed: int, salient: bool) -> list:
        return case_inputs(self.task, self.reference, context_len, seed, salient)

    def state_layout(self, context_len: int, steps: int) -> Layout:
        """The state layout after ``steps`` steps from a fresh state of ``context_len``."""
        start = layout_of(self.task.init_state(context_len, self.timing_seed))
        return grown(start, self.growth, steps)

    def _arena_bytes(self) -> int:
        """Room for the largest exchange: a step's inputs and outputs, and a chain's record."""
        longest = max(
            self.timing_shapes + [{"context_len": c, "steps": 1} for c in self.task.check_contexts],
            key=lambda s: s["context_len"] + s["steps"],
        )
        ctx, steps = longest["context_len"], max(s["steps"] for s in self.task.shapes)
        record = TensorLayout(
            (steps * timing.MAX_CHAINS_PER_REQUEST, *self.hidden_layout.shape), self.hidden_layout.dtype
        )
        # A timed request's chains each start from inputs of their own (ChainContestant).
        begins = [[self.hidden_layout, self.state_layout(ctx, 0)]] * timing.MAX_CHAINS_PER_REQUEST
        return arena_bytes_for(begins, [self.hidden_layout, self.state_layout(ctx, steps)], record)

    def _worker_arena_bytes(self) -> int:
        """Room for the largest exchange with a reference worker: a secret case's expected
        outputs and a salient case's inputs, or a chained step to judge (its inputs and
        outputs, at the longest chain's last step)."""
        ctx = max(self.task.check_contexts)
        case = arena_bytes_for([self.hidden_layout, self.state_layout(ctx, 1)], self.state_layout(ctx, 0))
        longest = max(self.timing_shapes, key=lambda s: s["context_len"] + s["steps"])
        chained = [self.hidden_layout, self.state_layout(longest["context_len"], longest["steps"])]
        return max(case, arena_bytes_for(chained, chained))

    def spec(self, who: str) -> building.Spec:
        solution = Path(str(self.job.solution)) if self.job.mode != "aa" else None
        return building.mega_spec(who, self.task.dir, solution, self.task.has_baseline, self.job.kind.model_class)

    # -- the solution ------------------------------------------------------------------------
    def remote_step(
        self, source: str, args: list | None, steps_done: int, context_len: int, keep: bool = False
    ) -> tuple[Hidden, State]:
        """One step in the solution's process, its (hidden, state) copied back here.

        ``source``: "fresh" (copies of ``args``), "reuse" (the previous call's very objects,
        overwritten in place with ``args``), or "chain" (the previous kept output)."""
        solution = self.solution
        solution.slots.reset()
        node = solution.put(args) if args is not None else None
        out = solution.expect((self.hidden_layout, self.state_layout(context_len, steps_done + 1)))
        reply = solution.request(
            {
                "op": "call",
                "method": "step",
                "what": "step",
                "source": source,
                "args": node,
                "out": out,
                "returns": "step's return value",
                "keep": keep,
            },
            "running a step",
        )
        if "bad_return" in reply:
            raise CandidateError(f"{str(reply['bad_return'])[:500]}")
        hidden, state = solution.take(out)
        return hidden, list(state)

    def run(self) -> None:
        self.prepare()
        with torch.no_grad():
            timed = self.job.mode != "check"
            self.bw = self.bandwidth() if timed and self.task.roofline is not None else None
            weights = self.weights_file(self.weights, self.weights_entry)
            self.begin_trusted(weights, [self.task.cfg])  # without a cache file, only now
            self.phase("bandwidth")
            self.finish_trusted(self._worker_arena_bytes())
            self.phase("trusted_loaded")
            hidden, state = self.timing_inputs(self.timing_shapes[0]["context_len"])
            self.connect_contestants(self._arena_bytes())
            # Calibrated with every trusted process loaded and idle: nothing else runs then.
            self.calibrate_contestants(lambda: reference_step(self.reference, hidden, state))
            self.phase("trusted_processes")
            self.seal_cache()
            # The solution loads while the secret cases are computed: it cannot know their
            # seeds, and every process that computes them loaded all it reads before this.
            loading = self.begin_load(self.spec("solution"), [self.task.cfg], weights)
            self._secret_cases()
            self.phase("secret_cases")
            if not self.finish_load(loading):
                return
            self.phase("load_solution")
            passed = self.correctness()
            if self.workers is not None:
                self.workers.close()  # before any timing: nothing but the contestants runs then
            if passed and timed:
                with lease.exclusive("timing", shared_after=False):  # the device alone (harness/lease.py)
                    self.performance()

    @property
    def weights(self) -> dict:
        return self.reference.state_dict()

    def correctness(self) -> bool:
        """Single steps, a report of whether a step repeats bit for bit, the overwrite check,
        and a chain validated step by step against the reference from the solution's own state
        (at each timed context when timed)."""
        current = "fixed_seeds"
        try:
            for current in ("fixed_seeds", "hidden_seeds"):
                if not self._check_single_steps(current):
                    return False
            self.phase("check_single_steps")
            current = "determinism"
            self._report_determinism()
            current = "overwrite_in_place"
            if not self._check_overwrite():
                return False
            current = "chained_steps"
            shapes = (
                self.timing_shapes
                if self.job.mode != "check"
                else [min(self.timing_shapes, key=lambda s: s["context_len"])]
            )
            for shape in shapes:
                chain = ValidatedChain(self, shape["context_len"], shape["steps"])
                if not self.send_check(current, *chain.run()):
                    return False
            self.phase("check_chained")
            return True
        except CandidateError as err:
            return self.solution_failed(current, err)

    def _check_single_steps(self, group: str) -> bool:
        """Fresh single steps from the fixed seeds, or from seeds drawn for this run only.

        Every case runs, pass or fail, and a failure says how many failed of how many and
        shows the worst: a solution wrong on a few inputs reads as such. A case whose
        reference routing sits on a near-tie (a fixed seed can, at some scale) is named in the
        data and the reason, and judged as any step is (StepChecker.judge)."""
        task = self.task
        cases = [c for c in self.cases if c.label.startswith("hidden") == (group == "hidden_seeds")]
        results, failures = [], []
        for case in cases:
            hidden_in, state_in = self.inputs_of(case)
            hidden, state = self.remote_step("fresh", [hidden_in, state_in], 0, case.context_len)
            result = self.checker.judge(
                hidden_in, state_in, hidden, state, case.expected_hidden, case.expected_state, case.margin
            )
            if result["passed"]:
                # A passing case is kept short: with many secret seeds, every cosine of
                # every case would make up most of a stored result.
                result = {k: result[k] for k in ("passed", "min_cosine", "worst", "excused") if k in result}
            else:
                failures.append((case, result))
            results.append(
                {
                    "case": case.label,
                    "decision_margin": case.margin,
                    "near_tie": self.checker.near_tie(case.margin),
                    **result,
                }
            )
        near_ties = [c.label for c in cases if self.checker.near_tie(c.margin)]
        data = {"cases": results, "seeds": [c.seed for c in cases], "near_ties": near_ties}
        if group == "hidden_seeds":
            data["redrawn_seeds"] = self.redrawn_seeds
        if failures:
            # The worst: non-finite values first, then the lowest cosine.
            case, result = min(failures, key=lambda f: (not f[1]["nonfinite"], f[1]["min_cosine"]))
            worst = fail_reason(case.label, result, task.threshold, case.margin, task.explained_margin)
            return self.send_check(group, "fail", f"{len(failures)} of {len(cases)} cases fail, worst: {worst}", **data)
        worst_cosine = min(r["min_cosine"] for r in results)
        return self.send_check(
            group,
            "pass",
            f"{len(results)} cases, min cosine {worst_cosine:.5f}" + near_tie_note(results, task.min_margin),
            **data,
        )

    def _report_determinism(self) -> None:
        """The same step twice, on fresh copies of identical inputs in the solution's process:
        whether the outputs are bitwise equal, and how far apart. Information, not a verdict:
        a kernel may reduce in a varying order (atomics, split-K) and still be right, as the
        checks judge; a reader of the result learns whether its answers repeat exactly."""
        case = next(c for c in self.cases if c.label.startswith("hidden"))
        inputs = self.inputs_of(case)
        first, second = [named_outputs(*self.remote_step("fresh", inputs, 0, case.context_len)) for _ in range(2)]
        differences = {
            name: max_abs_difference(second[name], tensor)
            for name, tensor in first.items()
            if not compare.bitwise_equal(second[name], tensor)
        }
        largest = max(differences, key=lambda name: differences[name], default=None)
        difference = differences[largest] if largest is not None else 0.0
        self.channel.send(
            "determinism",
            case=case.label,
            bitwise_equal=not differences,
            max_abs_diff=difference if math.isfinite(difference) else None,
            largest_in=largest,
        )

    def _check_overwrite(self) -> bool:
        """A second call on the very same input and state tensors, overwritten in place with
        another seed's values: an answer cached by pointer, id() or call count is stale."""
        task = self.task
        first = next(c for c in self.cases if not c.label.startswith("hidden"))
        second = next(c for c in self.cases if c.label.startswith("hidden") and c.context_len == first.context_len)
        results = []
        for case, source in ((first, "fresh"), (second, "reuse")):
            hidden_in, state_in = self.inputs_of(case)
            hidden, state = self.remote_step(source, [hidden_in, state_in], 0, case.context_len)
            result = self.checker.judge(
                hidden_in, state_in, hidden, state, case.expected_hidden, case.expected_state, case.margin
            )
            results.append({"case": case.label, **result})
            if not result["passed"]:
                label = f"second call on the same buffers ({case.label})" if case is second else case.label
                return self.send_check(
                    "overwrite_in_place", "fail", fail_reason(label, result, task.threshold), cases=results
                )
        return self.send_check(
            "overwrite_in_place",
            "pass",
            "a second call on the same buffers, overwritten in place, is still right",
            cases=results,
        )

    # -- timing ----------------------------------------------------------------------------
    def performance(self) -> None:
        settings = timing.Settings.of(self.job)
        roofline = self.task.roofline
        shapes = [
            timing.Shape(
                f"timed_chain_ctx_{s['context_len']}",
                f"ctx {s['context_len']}",
                s["context_len"],
                s["steps"],
                self._contestants_at(s["context_len"], s["steps"], settings.judged_chains),
                int(roofline.bytes_per_step(self.task.cfg, s["context_len"])) if roofline else None,
            )
            for s in self.timing_shapes
        ]
        if timing.time_contestants(self, shapes, settings) is None:
            return
        context_len = self.timing_shapes[0]["context_len"]
        self.count_launches("step", lambda: self.timing_inputs(context_len), context_len=context_len)

    def empty_requests(self, process: Any) -> tuple[dict, dict]:
        shape = self.timing_shapes[0]
        return ChainContestant(self, process, process.who, shape["context_len"], shape["steps"]).empty_requests()

    def _contestants_at(self, context_len: int, steps: int, judged_chains: int):
        def make() -> tuple[ChainContestant, ChainContestant]:
            return (
                ChainContestant(self, self.baseline_process, "baseline", context_len, steps),
                ChainContestant(self, self.solution, "candidate", context_len, steps, judged_chains),
            )

        return make

    def timing_inputs(self, context_len: int, seed: int | None = None) -> list:
        """The (hidden, state) at ``context_len`` that the reference draws from ``seed``, by
        default this evaluation's secret timing seed (where the validated chains start)."""
        seed = self.timing_seed if seed is None else seed
        return [self.task.init_token(seed), self.task.init_state(context_len, seed)]


class ValidatedChain:
    """One untimed chain of the solution from the secret timing seed's state, each output fed
    back in within its process, every step judged against the reference run from the
    solution's own input and state of that step: one step from an identical fed state, as in
    the fresh checks, so a near-tie in expert routing cannot make honest drift look like an
    error, while work skipped on chained steps shows. (The timed chains start from inputs of
    their own and are judged on their own, ChainContestant.)"""

    def __init__(self, evaluation: MegaEvaluation, context_len: int, steps: int):
        self.evaluation, self.context_len, self.steps = evaluation, context_len, steps
        # The steps (from 0) that matched only the reference that took a runner-up.
        self.tipped: list[int] = []

    def run(self) -> tuple[str, str]:
        """(status, reason) for the chain. The solution's steps run first, each one's inputs
        and outputs kept; then every step is judged, by the reference workers side by side
        where there are any. Never while the solution's process runs: the device probe after
        each of its answers must find no other context's work on the device (a worker's
        reference step would read as work the solution left running)."""
        evaluation, task = self.evaluation, self.evaluation.task
        hidden_in, state_in = evaluation.timing_inputs(self.context_len)
        steps = []
        for i in range(self.steps):
            hidden, state = evaluation.remote_step(
                "fresh" if i == 0 else "chain",
                [hidden_in, state_in] if i == 0 else None,
                i,
                self.context_len,
                keep=True,
            )
            steps.append((hidden_in, state_in, hidden, state))
            hidden_in, state_in = hidden, state
        judged = [evaluation.judge_step(*step) for step in steps]
        worst = 1.0
        for i, pending in enumerate(judged):
            result, margin = pending()
            if "excused" in result:
                # A near-tie in the reference's own routing at this state, and the step is the
                # reference's with the runner-up taken there: rounding decided which expert won.
                # The next step is judged from the state this one fed it, as every step is.
                self.tipped.append(i)
                continue
            worst = min(worst, result["min_cosine"])
            if not result["passed"]:
                for rest in judged[i + 1 :]:
                    rest()  # every worker idle again
                return "fail", fail_reason(
                    f"ctx {self.context_len} step {i + 1} of a chain",
                    result,
                    task.threshold,
                    margin,
                    task.explained_margin,
                )
        note = (
            f"; steps {[i + 1 for i in self.tipped]} differ at a near-tie of the reference's routing, where they "
            "match the reference that took the runner-up"
            if self.tipped
            else ""
        )
        return "pass", (
            f"a chain of {self.steps} steps at ctx {self.context_len}: each step matches the reference "
            f"from the same state (min cosine {worst:.5f}){note}"
        )


@dataclass
class TimedChain:
    """One chain a contestant ran while timed: the secret seed of its inputs, and the hidden
    it recorded at each step (copied into the referee's memory)."""

    seed: int
    hiddens: torch.Tensor


class ChainContestant(timing.Contestant):
    """A contestant of a decode task's timing, in its own process (the baseline's or the
    solution's, served alike): chains of steps, each output fed back in there, each step's
    hidden recorded into the arena.

    Every chain starts from inputs of its own, drawn by the reference from a seed drawn for
    that chain when its request is staged: no chain's inputs were ever shown to the solution
    before, so no answer to them can have been kept from an earlier call. A candidate's
    chains are judged: every step's values must be finite, and once the shape is timed
    ``judged_chains`` of its chains, chosen at random, are judged step by step against the
    reference (StepChecker.judge_timed), so that a chain cannot know whether it is one."""

    def __init__(
        self,
        evaluation: MegaEvaluation,
        process: Any,
        name: str,
        context_len: int,
        steps: int,
        judged_chains: int = 0,
    ):
        super().__init__(name, process, steps)
        self.evaluation = evaluation
        self.device = evaluation.device
        self.context_len = context_len
        self.judged_chains = judged_chains
        process.slots.reset()
        template = evaluation.timing_inputs(context_len)
        self.begin_nodes = [process.put(template) for _ in range(timing.MAX_CHAINS_PER_REQUEST)]
        hidden = evaluation.hidden_layout
        self.record_slot = process.slots.slot((steps * timing.MAX_CHAINS_PER_REQUEST, *hidden.shape), hidden.dtype)
        self.record = process.arena.view(self.record_slot)
        self.staged_seeds: list[int] = []  # the seeds of the chains the next timed request starts
        self.running_seeds: list[int] = []  # of the chains the last request that started any started
        self.chains: list[TimedChain] = []
        self.failures: list[str] = []

    def stage_request(self, copies: int) -> dict:
        if copies:
            # New chains: nothing of an earlier chain can pass for these ones', and each one's
            # inputs are drawn now, whatever the process did to the arena since.
            self.record.fill_(float("nan"))
            self.staged_seeds = [secret_seed() for _ in range(copies)]
            for node, seed in zip(self.begin_nodes, self.staged_seeds, strict=False):
                self.process.put_into(node, self.evaluation.timing_inputs(self.context_len, seed))
            timing.synchronize(self.device)
        return {"op": "stage", "begins": self.begin_nodes[:copies]}

    def block_request(self, first: int, count: int, chains: int, fresh: bool) -> dict:
        if fresh and count:
            self.running_seeds = self.staged_seeds[:chains]
        return {
            "op": "chain",
            "steps": count,
            "chains": chains,
            "fresh": fresh,
            "record": self.record_slot,
            "record_from": first,
        }

    def chain_done(self, steps_done: int, chains: int) -> None:
        """Every run of the chain since it began: its values finite at every step, and kept
        (its seed and hiddens) for the judging after the shape (``verdict``)."""
        if not self.judged_chains:
            return
        recorded = self.record[: self.steps * chains].clone()
        for run, seed in enumerate(self.running_seeds[:chains]):
            hiddens = recorded[run * self.steps : run * self.steps + steps_done]
            finite = compare.rows_finite(hiddens)
            if not all(finite) and not self.failures:
                self.failures.append(
                    f"ctx {self.context_len} step {finite.index(False) + 1} of a timed chain: non-finite values"
                )
            self.chains.append(TimedChain(seed, hiddens))

    def verdict(self) -> tuple[str, str]:
        """(status, reason) for the timed chains: ``judged_chains`` of them, chosen at random
        now, judged step by step against the reference from the hiddens each fed itself."""
        if self.failures:
            return "fail", self.failures[0]
        if not self.judged_chains:
            return "pass", "not checked"
        evaluation, task = self.evaluation, self.evaluation.task
        chosen = secrets.SystemRandom().sample(self.chains, min(self.judged_chains, len(self.chains)))
        worst, steps, excused = 1.0, 0, 0
        with torch.no_grad():
            for chain in chosen:
                hidden_in, state_in = evaluation.timing_inputs(self.context_len, chain.seed)
                for i, hidden in enumerate(chain.hiddens):
                    result, state_in = evaluation.checker.judge_timed(hidden_in, state_in, hidden)
                    steps += 1
                    if "excused" in result:
                        excused += 1
                    elif not result["passed"]:
                        return "fail", fail_reason(
                            f"ctx {self.context_len} step {i + 1} of a timed chain (judged against the "
                            "reference from the hiddens the chain fed itself)",
                            result,
                            task.threshold,
                            result["decision_margin"],
                            task.explained_margin,
                        )
                    else:
                        worst = min(worst, result["min_cosine"])
                    hidden_in = hidden
        note = f"; {excused} of them match the reference that took the runner-up at a near-tie" if excused else ""
        return "pass", (
            f"{len(self.chains)} timed chain(s) of {self.steps} steps at ctx {self.context_len}, each from inputs "
            f"of its own; {len(chosen)} chosen at random afterwards, {steps} steps judged against the reference "
            f"(min cosine {worst:.5f}){note}"
        )
