"""Evaluation of a KernelBench-style single-file task.

The task file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``; the solution
defines ``ModelNew`` with the same constructor arguments. Correctness is ``allclose`` at the
tolerance of the job; speed is measured against the file's own ``Model``, eager.
"""
from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import torch

from . import compare, timing
from .base import EvaluationBase
from .loading import CandidateError, TaskError, candidate_call, load_module, to_device


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
            self.expected = {seed: [t.clone() for t in _tensors(self.reference(*self._inputs(seed)))]
                             for seed in [*self.seeds, *self.hidden_seeds, self.timing_seed]}
            self.phase("reference_outputs")
            # Before any candidate code runs: what the harness times and judges with.
            self.watch_integrity({"reference": self.reference})
            # Also before: what it leaves in the cache can be trusted (see seal_cache).
            self.bw = self.bandwidth() if self.job["mode"] != "check" else None
            self.seal_cache()
            try:
                self.candidate = self._load_candidate()
            except CandidateError as err:
                self.send_check("load", "error", err.message, details=err.details)
                return
            self.send_check("load", "pass", "imported and constructed")
            self.phase("load_solution")
            if not self.integrity_holds("after import"):
                return
            try:
                if not self._correctness():
                    return
            except CandidateError as err:
                self.send_check("forward", "error", err.message, details=err.details)
                return
            if not self.integrity_holds("after the correctness checks"):
                return
            self.phase("check")
            if self.job["mode"] != "check":
                self._performance()

    def _load_candidate(self) -> torch.nn.Module:
        if self.job["mode"] == "aa":
            cls = self.problem.Model
        else:
            path = Path(self.job["solution"])
            sys.path.insert(0, str(path.parent))
            module = candidate_call("importing the solution", lambda: load_module("solution", path))
            cls = getattr(module, "ModelNew", None)
            if cls is None:
                raise CandidateError("the solution defines no class ModelNew")
        model = candidate_call("ModelNew(*get_init_inputs())", lambda: self._construct(cls))
        reference_state = self.reference.state_dict()
        own = model.state_dict()
        if own.keys() == reference_state.keys() and all(own[k].shape == v.shape for k, v in reference_state.items()):
            # Same parameters as Model: make sure they hold the same values, whatever the init order.
            model.load_state_dict(reference_state)
        return model

    def _outcome(self, seed: int, inputs: list, keep_alive: list | None = None) -> dict:
        output = candidate_call("forward", lambda: self.candidate(*inputs))
        if keep_alive is not None:
            keep_alive.append((inputs, output))
        return self._judge(output, self.expected[seed])

    def _judge(self, output: Any, expected: list[torch.Tensor]) -> dict:
        got = _tensors(output)
        if len(got) != len(expected):
            return {"passed": False, "reason": f"{len(got)} output tensors, expected {len(expected)}"}
        for i, (g, e) in enumerate(zip(got, expected)):
            if tuple(g.shape) != tuple(e.shape):
                return {"passed": False, "reason": f"output {i}: shape {tuple(g.shape)}, expected {tuple(e.shape)}"}
            if not compare.is_finite(g) and compare.is_finite(e):
                return {"passed": False, "reason": f"output {i}: non-finite values"}
            if not compare.allclose(g, e, self.atol, self.rtol):
                diff = compare.max_abs_diff(g, e)
                return {"passed": False, "reason": f"output {i}: max abs difference {diff:.3g} exceeds "
                                                   f"atol {self.atol} + rtol {self.rtol}·|expected|"}
        return {"passed": True, "reason": "allclose"}

    def _correctness(self) -> bool:
        # Every case's inputs stay alive until the end, so each has addresses of its own and
        # an answer cached by pointer can only go stale in the overwrite check below.
        keep_alive = []
        for group, seeds in (("fixed_seeds", self.seeds), ("hidden_seeds", self.hidden_seeds)):
            for seed in seeds:
                outcome = self._outcome(seed, self._inputs(seed), keep_alive)
                if not outcome["passed"]:
                    label = f"seed {seed}" if group == "fixed_seeds" else "a seed drawn for this run"
                    return self.send_check(group, "fail", f"{label}: {outcome['reason']}")
            self.send_check(group, "pass", f"{len(seeds)} input sets allclose (atol {self.atol}, rtol {self.rtol})",
                            seeds=seeds)
        # The same input tensors, overwritten in place: a cache keyed by pointer must miss.
        inputs = self._inputs(self.seeds[0])
        first = self._outcome(self.seeds[0], inputs)
        fresh = self._inputs(self.hidden_seeds[0]) if self.hidden_seeds else self._inputs(self.seeds[-1])
        for old, new in zip(inputs, fresh):
            if isinstance(old, torch.Tensor):
                old.copy_(new)
        second = self._outcome(self.hidden_seeds[0] if self.hidden_seeds else self.seeds[-1], inputs)
        if not (first["passed"] and second["passed"]):
            return self.send_check("overwrite_in_place", "fail",
                                   f"second call on the same buffers: {second['reason']}")
        return self.send_check("overwrite_in_place", "pass", "a second call on the same, overwritten buffers is right")

    def _performance(self) -> None:
        rounds = int(self.job.get("rounds") or 5)
        steps = int(self.job.get("steps") or 20)
        inputs = self._inputs(self.timing_seed)
        base = ForwardPlayer("baseline", self.reference, inputs)
        cand = ForwardPlayer("candidate", self.candidate, inputs)
        clocks_before = self.clocks()
        walls: list[timing.RoundWall] = []
        try:
            timing.run_interleaved(self.device, [base, cand], rounds=1, steps=3)
            samples = timing.run_interleaved(self.device, [base, cand], rounds=rounds, steps=steps, walls=walls)
        except CandidateError as err:
            self.send_check("timed_calls", "error", err.message, details=err.details)
            return
        outcome = self._judge(cand.last_output, self.expected[self.timing_seed])
        if not self.send_check("timed_calls", "pass" if outcome["passed"] else "fail",
                               f"output of the last timed call: {outcome['reason']}"):
            return
        if not self.no_hidden_work(cand, walls, "timed calls",
                                   synced_steps=timing.SYNCED_STEPS):
            return
        stats = {"baseline": timing.summarize(samples["baseline"]), "candidate": timing.summarize(samples["candidate"])}
        result = {"label": "default", "context_len": None, "steps": steps, "rounds": rounds, **stats,
                  **timing.speedup_with_noise(samples["baseline"], samples["candidate"])}
        bw = self.bw
        # The least a forward can move: read every input and parameter once, write the output once.
        nbytes = _nbytes(inputs) + _nbytes(self.expected[self.timing_seed]) + sum(
            _nbytes(t) for t in self.reference.state_dict().values())
        floor_ms = nbytes / bw["bytes_per_s"] * 1e3
        result["roofline"] = {"bytes_per_step": nbytes, "floor_ms": floor_ms,
                              "candidate_fraction": floor_ms / stats["candidate"]["median_ms"],
                              "baseline_fraction": floor_ms / stats["baseline"]["median_ms"]}
        # No physics check here: a KernelBench problem's inputs and weights can be small enough
        # to stay in the device's cache between calls, where beating the DRAM floor is honest.
        if not self.integrity_holds("after timing"):
            return
        self.channel.send("timing", **result)
        self.phase("timing")
        self.channel.send("score", geomean_speedup=result["speedup"], clocks_before=clocks_before,
                          clocks_after=self.clocks())
        for who, model in (("baseline", self.reference), ("candidate", self.candidate)):
            self.report_launches(who, lambda: model(*inputs))
        self.phase("launches")

class ForwardPlayer:
    """Calls ``model(*inputs)`` once per step; keeps the last output for validation."""

    def __init__(self, name: str, model: torch.nn.Module, inputs: list):
        self.name = name
        self.model = model
        self.inputs = inputs
        self.is_candidate = name == "candidate"
        self.last_output: Any = None

    def begin_round(self, round_index: int) -> None:
        pass  # the inputs stay the same from call to call

    def step(self, step_index: int) -> None:
        if self.is_candidate:
            self.output = candidate_call("forward", lambda: self.model(*self.inputs))
        else:
            self.output = self.model(*self.inputs)

    def after_step(self, step_index: int) -> None:
        self.last_output = self.output

    def end_round(self, round_index: int) -> None:
        self.last_output = [t.clone() for t in _tensors(self.last_output)]
