"""Evaluation of a KernelBench-style single-file task.

The task file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``; the solution
defines ``ModelNew`` with the same constructor arguments. Correctness is ``allclose`` at the
tolerance of the job; speed is measured against the file's own ``Model``, eager.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import torch

from . import building, compare, lease, timing
from .base import EvaluationBase, arena_bytes_for
from .exchange import Layout
from .loading import CandidateError, TaskError, load_module
from .remote import layout_of


def _tensors(value: Any) -> list[torch.Tensor]:
    """The output as a flat list of tensors (a model may return a tensor or a tuple)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    raise CandidateError(f"forward returned {type(value).__name__}, expected tensors")


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


class KernelBenchEvaluation(EvaluationBase):
    def __init__(self, job: dict, channel, early: dict | None = None, began: float | None = None):
        super().__init__(job, channel, early, began)
        self.atol = float(job.get("atol", 1e-2))
        self.rtol = float(job.get("rtol", 1e-2))
        self.seeds = list(job.get("seeds") or [0, 1, 2])
        self.timing_seed = int(job.get("timing_seed", 0))

    def _load_problem(self) -> None:
        path = Path(self.job["task_file"])
        try:
            self.problem = load_module(building.KERNELBENCH_MODULE, path)
            for name in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(self.problem, name):
                    raise TaskError(f"{path.name} defines no {name}: not a KernelBench problem file")
            self.init_inputs = list(self.problem.get_init_inputs())
        except TaskError:
            raise
        except Exception as err:
            raise TaskError(f"cannot load {path.name}: {type(err).__name__}: {err}") from err

    def _inputs(self, seed: int) -> list:
        return building.kernelbench_inputs(self.problem, seed, self.device)

    def spec(self, who: str) -> building.Spec:
        solution = Path(self.job["solution"]) if self.job["mode"] != "aa" else None
        return building.kernelbench_spec(who, Path(self.job["task_file"]), solution)

    def run(self) -> None:
        self._load_problem()
        self.phase("load_task")
        with torch.no_grad():
            # The referee's reference, built as every contestant is (building.build).
            self.reference = building.build(self.spec("reference"), self.init_inputs, self.device, module=self.problem)
            self.hidden_seeds = [1000 + secrets.randbelow(1 << 30) for _ in range(int(self.job.get("hidden_seeds", 2)))]
            outputs = {
                seed: self.reference(*self._inputs(seed))
                for seed in [*self.seeds, *self.hidden_seeds, self.timing_seed]
            }
            self.single_output = isinstance(outputs[self.timing_seed], torch.Tensor)
            self.expected = {seed: [t.clone() for t in _tensors(out)] for seed, out in outputs.items()}
            self.phase("reference_outputs")
            # Before the solution's process loads anything: what it leaves in the cache can be trusted.
            self.bw = self.bandwidth() if self.job["mode"] != "check" else None
            inputs = self._inputs(self.timing_seed)
            outputs = layout_of(self.expected[self.timing_seed])
            self.connect_contestants(arena_bytes_for(inputs, outputs, outputs))
            weights = self.weights_file(self.reference.state_dict(), None)
            self.begin_trusted(weights, self.init_inputs)
            self.finish_trusted()
            self.calibrate_contestants(lambda: self.reference(*inputs))
            self.seal_cache()
            if not self.finish_load(self.begin_load(self.spec("solution"), self.init_inputs, weights)):
                return
            self.phase("load_solution")
            current = "forward"
            try:
                if not self._correctness():
                    return
                self.phase("check")
                if self.job["mode"] != "check":
                    current = "timed_calls"
                    with lease.exclusive("timing", shared_after=False):  # the device alone (harness/lease.py)
                        self._performance()
            except CandidateError as err:
                self.solution_failed(current, err)

    def _forward(self, source: str, inputs: list, seed: int) -> dict:
        """One forward in the solution's process on ``inputs`` (fresh copies, or the previous
        call's very tensors overwritten in place), judged against the seed's expected output."""
        solution = self.solution
        solution.slots.reset()
        out = solution.expect(self._returns(self.expected[seed]))
        reply = solution.request(
            {
                "op": "call",
                "method": "__call__",
                "what": "forward",
                "source": source,
                "args": solution.put(inputs),
                "out": out,
                "returns": "forward's return value",
            },
            "running forward",
        )
        if "bad_return" in reply:
            return {"passed": False, "reason": str(reply["bad_return"])[:500]}
        return self._judge(solution.take(out), self.expected[seed])

    def _returns(self, expected: list[torch.Tensor]) -> Any:
        """What forward must return: one tensor, or a tuple of them, as the reference does."""
        layouts = [Layout.of(t) for t in expected]
        return layouts[0] if self.single_output else tuple(layouts)

    def _judge(self, output: Any, expected: list[torch.Tensor]) -> dict:
        got = _tensors(output)
        for i, (g, e) in enumerate(zip(got, expected, strict=False)):
            if not compare.is_finite(g) and compare.is_finite(e):
                return {"passed": False, "reason": f"output {i}: non-finite values"}
            if not compare.allclose(g, e, self.atol, self.rtol):
                diff = compare.max_abs_diff(g, e)
                return {
                    "passed": False,
                    "reason": f"output {i}: max abs difference {diff:.3g} exceeds "
                    f"atol {self.atol} + rtol {self.rtol}·|expected|",
                }
        return {"passed": True, "reason": "allclose"}

    def _correctness(self) -> bool:
        for group, seeds in (("fixed_seeds", self.seeds), ("hidden_seeds", self.hidden_seeds)):
            for seed in seeds:
                outcome = self._forward("fresh", self._inputs(seed), seed)
                if not outcome["passed"]:
                    label = f"seed {seed}" if group == "fixed_seeds" else "a seed drawn for this run"
                    return self.send_check(group, "fail", f"{label}: {outcome['reason']}")
            self.send_check(
                group, "pass", f"{len(seeds)} input sets allclose (atol {self.atol}, rtol {self.rtol})", seeds=seeds
            )
        # The same input tensors, overwritten in place: a cache keyed by pointer must miss.
        second_seed = self.hidden_seeds[0] if self.hidden_seeds else self.seeds[-1]
        first = self._forward("fresh", self._inputs(self.seeds[0]), self.seeds[0])
        second = self._forward("reuse", self._inputs(second_seed), second_seed)
        if not (first["passed"] and second["passed"]):
            return self.send_check("overwrite_in_place", "fail", f"second call on the same buffers: {second['reason']}")
        return self.send_check("overwrite_in_place", "pass", "a second call on the same, overwritten buffers is right")

    def empty_requests(self, process: Any) -> tuple[dict, dict]:
        expected = self.expected[self.timing_seed]
        return CallsContestant(
            self, process, process.who, self._timed_calls(), self._inputs(self.timing_seed), expected, judged=False
        ).empty_requests()

    def _timed_calls(self) -> int:
        return int(self.job.get("steps") or 20)

    def _performance(self) -> None:
        steps = self._timed_calls()
        # A block of at least a whole chain of calls (one request per round where the calls
        # are slow enough), as KernelBench times them.
        settings = timing.Settings.of(self.job, rounds=5, warmup=3, block_steps=steps)
        inputs = self._inputs(self.timing_seed)
        expected = self.expected[self.timing_seed]

        def contestants() -> tuple[CallsContestant, CallsContestant]:
            return (
                CallsContestant(self, self.baseline_process, "baseline", steps, inputs, expected, judged=False),
                CallsContestant(self, self.solution, "candidate", steps, inputs, expected, judged=True),
            )

        # The least a forward can move: read every input and parameter once, write the output
        # once. No physics check here: a KernelBench problem's inputs and weights can be small
        # enough to stay in the device's cache between calls, where beating the DRAM floor is
        # honest.
        nbytes = _nbytes(inputs) + _nbytes(expected) + sum(_nbytes(t) for t in self.reference.state_dict().values())
        shape = timing.Shape("timed_calls", "default", None, steps, contestants, nbytes, physics=False)
        if timing.time_contestants(self, [shape], settings) is None:
            return
        self.count_launches("__call__", lambda: inputs)


class CallsContestant(timing.Contestant):
    """A KernelBench file's contestant in the timing, in its own process (the baseline's, the
    file's own Model; or the solution's): forwards on the same inputs, a chain of ``steps``
    of them from a fresh copy; the candidate's last output is checked after each chain."""

    def __init__(
        self,
        evaluation: KernelBenchEvaluation,
        process: Any,
        name: str,
        steps: int,
        inputs: list,
        expected: list[torch.Tensor],
        judged: bool,
    ):
        super().__init__(name, process, steps)
        self.evaluation, self.expected, self.judged = evaluation, expected, judged
        self.template = inputs
        process.slots.reset()
        self.inputs_node = process.put(inputs)
        self.out = process.expect(evaluation._returns(expected))
        self.failure: str | None = None

    def stage_request(self, copies: int) -> dict:
        if copies:  # the inputs are the template's again, whatever the process did to the arena since
            self.process.put_into(self.inputs_node, self.template)
            timing.synchronize(self.evaluation.device)
        return {"op": "stage", "begins": [self.inputs_node] if copies else []}

    def block_request(self, first: int, count: int, chains: int, fresh: bool) -> dict:
        return {
            "op": "repeat",
            "method": "__call__",
            "what": "forward",
            "steps": count * chains,
            "out": self.out,
            "returns": "forward's return value",
        }

    def chain_done(self, steps_done: int, chains: int) -> None:
        if not self.judged:
            return
        outcome = self.evaluation._judge(self.process.take(self.out), self.expected)
        if not outcome["passed"] and self.failure is None:
            self.failure = f"output of the last timed call: {outcome['reason']}"

    def verdict(self) -> tuple[str, str]:
        if self.failure:
            return "fail", self.failure
        return "pass", "output of the last timed call: allclose"
