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

from . import compare, lease, timing
from .base import EvaluationBase, arena_bytes_for
from .exchange import Layout
from .loading import CandidateError, TaskError, load_module, to_device
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
    def __init__(self, job: dict, channel):
        super().__init__(job, channel)
        self.atol = float(job.get("atol", 1e-2))
        self.rtol = float(job.get("rtol", 1e-2))
        self.seeds = list(job.get("seeds") or [0, 1, 2])
        self.timing_seed = int(job.get("timing_seed", 0))

    def _load_problem(self) -> None:
        path = Path(self.job["task_file"])
        try:
            self.problem = load_module("_kagent_kernelbench_problem", path)
            for name in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(self.problem, name):
                    raise TaskError(f"{path.name} defines no {name}: not a KernelBench problem file")
            self.init_inputs = list(self.problem.get_init_inputs())
        except TaskError:
            raise
        except Exception as err:
            raise TaskError(f"cannot load {path.name}: {type(err).__name__}: {err}") from err

    def _construct(self, cls: type) -> torch.nn.Module:
        torch.manual_seed(42)  # the same seed for both models, as KernelBench does
        return cls(*self.init_inputs).to(self.device).eval()

    def _inputs(self, seed: int) -> list:
        torch.manual_seed(seed)
        return to_device(list(self.problem.get_inputs()), self.device)

    def run(self) -> None:
        self._load_problem()
        self.phase("load_task")
        with torch.no_grad():
            self.reference = self._construct(self.problem.Model)
            self.hidden_seeds = [1000 + secrets.randbelow(1 << 30) for _ in range(int(self.job.get("hidden_seeds", 2)))]
            outputs = {seed: self.reference(*self._inputs(seed))
                       for seed in [*self.seeds, *self.hidden_seeds, self.timing_seed]}
            self.single_output = isinstance(outputs[self.timing_seed], torch.Tensor)
            self.expected = {seed: [t.clone() for t in _tensors(out)] for seed, out in outputs.items()}
            self.phase("reference_outputs")
            # Before the solution's process starts: what it leaves in the cache can be trusted.
            self.bw = self.bandwidth() if self.job["mode"] != "check" else None
            self.seal_cache()
            try:
                self._load_candidate()
            except CandidateError as err:
                self.solution_failed("load", err)
                return
            self.send_check("load", "pass", "imported and constructed in a process of its own",
                            **self.solution_facts())
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

    def _load_candidate(self) -> None:
        """Start the solution's process and have it build the solution (or, in A/A mode, the
        task's own Model) with the seed and the reference's weights the referee's has."""
        inputs = self._inputs(self.timing_seed)
        outputs = layout_of(self.expected[self.timing_seed])
        solution = self.start_solution(arena_bytes_for(inputs, outputs, outputs), lambda: self.reference(*inputs))
        if self.job["mode"] == "aa":
            path, module, cls, label = Path(self.job["task_file"]), "_kagent_kernelbench_problem", "Model", "the task's"
        else:
            path, module, cls, label = Path(self.job["solution"]), "solution", "ModelNew", "the solution's"
        weights = self.weights_file(self.reference.state_dict(), None)
        solution.request({"op": "load", "module": module, "path": str(path), "search": [str(path.parent)],
                          "class": cls, "label": label, "init": solution.put(self.init_inputs), "seed": 42,
                          "weights": weights, "weights_strict": False}, f"loading {label} {cls}")

    def _forward(self, source: str, inputs: list, seed: int) -> dict:
        """One forward in the solution's process on ``inputs`` (fresh copies, or the previous
        call's very tensors overwritten in place), judged against the seed's expected output."""
        solution = self.solution
        solution.slots.reset()
        out = solution.expect(self._returns(self.expected[seed]))
        reply = solution.request({"op": "call", "method": "__call__", "what": "forward", "source": source,
                                  "args": solution.put(inputs), "out": out, "returns": "forward's return value"},
                                 "running forward")
        if "bad_return" in reply:
            return {"passed": False, "reason": str(reply["bad_return"])[:500]}
        return self._judge(solution.take(out), self.expected[seed])

    def _returns(self, expected: list[torch.Tensor]) -> Any:
        """What forward must return: one tensor, or a tuple of them, as the reference does."""
        layouts = [Layout.of(t) for t in expected]
        return layouts[0] if self.single_output else tuple(layouts)

    def _judge(self, output: Any, expected: list[torch.Tensor]) -> dict:
        got = _tensors(output)
        # As many as expected: the exchange takes only the layout the reference returns.
        for i, (g, e) in enumerate(zip(got, expected, strict=False)):
            if not compare.is_finite(g) and compare.is_finite(e):
                return {"passed": False, "reason": f"output {i}: non-finite values"}
            if not compare.allclose(g, e, self.atol, self.rtol):
                diff = compare.max_abs_diff(g, e)
                return {"passed": False, "reason": f"output {i}: max abs difference {diff:.3g} exceeds "
                                                   f"atol {self.atol} + rtol {self.rtol}·|expected|"}
        return {"passed": True, "reason": "allclose"}

    def _correctness(self) -> bool:
        for group, seeds in (("fixed_seeds", self.seeds), ("hidden_seeds", self.hidden_seeds)):
            for seed in seeds:
                outcome = self._forward("fresh", self._inputs(seed), seed)
                if not outcome["passed"]:
                    label = f"seed {seed}" if group == "fixed_seeds" else "a seed drawn for this run"
                    return self.send_check(group, "fail", f"{label}: {outcome['reason']}")
            self.send_check(group, "pass", f"{len(seeds)} input sets allclose (atol {self.atol}, rtol {self.rtol})",
                            seeds=seeds)
        # The same input tensors, overwritten in place: a cache keyed by pointer must miss.
        second_seed = self.hidden_seeds[0] if self.hidden_seeds else self.seeds[-1]
        first = self._forward("fresh", self._inputs(self.seeds[0]), self.seeds[0])
        second = self._forward("reuse", self._inputs(second_seed), second_seed)
        if not (first["passed"] and second["passed"]):
            return self.send_check("overwrite_in_place", "fail",
                                   f"second call on the same buffers: {second['reason']}")
        return self.send_check("overwrite_in_place", "pass", "a second call on the same, overwritten buffers is right")

    def _performance(self) -> None:
        rounds = int(self.job.get("rounds") or 5)
        steps = int(self.job.get("steps") or 20)
        inputs = self._inputs(self.timing_seed)
        expected = self.expected[self.timing_seed]
        base = ReferenceCalls(self.device, self.reference, inputs)
        cand = SolutionCalls(self, inputs, expected)
        timing.freeze_heap()
        clocks_before = self.clocks()
        with timing.one_cpu_for_both(self.solution.process.pid):
            timing.run_untimed(base, 3, steps)
            timing.run_untimed(cand, 3, steps)
            samples = timing.run_blocks(self.device, [base, cand], rounds=rounds, steps=steps, block_steps=steps)
            isolated_ms = timing.isolated_step_ms(cand, steps, self.solution.interlude)
        if not self.send_check("timed_calls", *cand.verdict()):
            return
        stats = {"baseline": timing.summarize(samples["baseline"]), "candidate": timing.summarize(samples["candidate"])}
        result = {"label": "default", "context_len": None, "steps": steps, "rounds": rounds, "block_steps": steps,
                  **stats, **timing.speedup_with_noise(samples["baseline"], samples["candidate"]),
                  "baseline_samples_ms": samples["baseline"], "candidate_samples_ms": samples["candidate"],
                  "candidate_isolated_ms": isolated_ms}
        bw = self.bw  # measured in every mode that times (run)
        if bw is not None:
            # The least a forward can move: read every input and parameter once, write the output once.
            nbytes = _nbytes(inputs) + _nbytes(expected) + sum(_nbytes(t) for t in self.reference.state_dict().values())
            floor_ms = nbytes / bw["bytes_per_s"] * 1e3
            result["roofline"] = {"bytes_per_step": nbytes, "floor_ms": floor_ms,
                                  "candidate_fraction": floor_ms / stats["candidate"]["median_ms"],
                                  "baseline_fraction": floor_ms / stats["baseline"]["median_ms"]}
        # No physics check here: a KernelBench problem's inputs and weights can be small enough
        # to stay in the device's cache between calls, where beating the DRAM floor is honest.
        self.channel.send("timing", **result)
        self.phase("timing")
        self.channel.send("score", geomean_speedup=result["speedup"], clocks_before=clocks_before,
                          clocks_after=self.clocks())
        self.report_launches("baseline", lambda: self.reference(*inputs))
        self.solution_launches("candidate", "__call__", inputs)
        self.phase("launches")


class ReferenceCalls:
    """The task's Model as a timed contestant: ``model(*inputs)`` per step, in the referee."""

    name = "baseline"
    block_steps: int | None = None

    def __init__(self, device: torch.device, model: torch.nn.Module, inputs: list):
        self.device, self.model, self.inputs = device, model, inputs

    def begin_chain(self, round_index: int) -> None:
        pass

    def block(self, first_step: int, steps: int) -> float:
        def calls() -> None:
            for _ in range(steps):
                self.model(*self.inputs)
        return timing.wall_ms(self.device, calls)

    def end_chain(self, round_index: int) -> None:
        pass


class SolutionCalls:
    """The solution as a timed contestant: ``steps`` forwards on the same inputs in its own
    process per block, the last output copied to the arena and checked after each round."""

    name = "candidate"
    block_steps: int | None = None

    def __init__(self, evaluation: KernelBenchEvaluation, inputs: list, expected: list[torch.Tensor]):
        self.evaluation, self.expected = evaluation, expected
        self.solution = evaluation.solution
        self.solution.slots.reset()
        self.inputs_node = self.solution.put(inputs)
        self.out = self.solution.expect(evaluation._returns(expected))
        self.began = False
        self.failure: str | None = None

    def begin_chain(self, round_index: int) -> None:
        pass

    def block(self, first_step: int, steps: int) -> float:
        reply = self.solution.request(
            {"op": "repeat", "method": "__call__", "what": "forward", "steps": steps, "out": self.out,
             "returns": "forward's return value", "begin": None if self.began else self.inputs_node},
            "running timed forwards")
        self.began = True
        if "bad_return" in reply:
            raise CandidateError(str(reply["bad_return"])[:500])
        return float(reply["block_ms"])

    def end_chain(self, round_index: int) -> None:
        outcome = self.evaluation._judge(self.solution.take(self.out), self.expected)
        if not outcome["passed"] and self.failure is None:
            self.failure = f"output of the last timed call: {outcome['reason']}"

    def verdict(self) -> tuple[str, str]:
        if self.failure:
            return "fail", self.failure
        return "pass", "output of the last timed call: allclose"
