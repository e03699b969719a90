"""Evaluation of a KernelBench-Mega-style task: a stateful ``Model.step(hidden, state)``.

The order matters for integrity: the reference's weights and expected outputs (including
those for seeds drawn now, which no candidate can know in advance) are computed before the
candidate's module is imported, so candidate code cannot influence them.
"""
from __future__ import annotations

import inspect
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml

from . import compare, timing
from .base import EvaluationBase
from .loading import CandidateError, DiskCache, TaskError, candidate_call, digest, load_module

Hidden = torch.Tensor
State = list  # one dict of tensors per layer


@dataclass
class Case:
    """One correctness case: inputs drawn from a seed, and what the reference returns."""

    label: str
    context_len: int
    seed: int
    expected_hidden: Hidden
    expected_state: State


def _load_task_module(name: str, path: Path) -> ModuleType:
    try:
        return load_module(name, path)
    except Exception as err:
        raise TaskError(f"cannot load the task's {path.name}: {type(err).__name__}: {err}") from err


class Task:
    """The task folder's modules and grading metadata, loaded from the pristine bundle."""

    def __init__(self, task_dir: Path, scale: str, device: torch.device):
        self.dir = task_dir
        self.device = device
        try:
            self.problem = yaml.safe_load((task_dir / "problem.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise TaskError(f"cannot read the task's problem.yaml: {err}") from err
        self.reference = _load_task_module("reference", task_dir / "reference.py")
        shapes = _load_task_module("_kagent_task_shapes", task_dir / "shapes.py")
        smoke = getattr(shapes, "SMOKE_SHAPES", None)
        if scale == "smoke" and not smoke:
            raise TaskError("this task defines no smoke scale (SMOKE_SHAPES in shapes.py)")
        self.shapes: list[dict] = list(smoke if scale == "smoke" else shapes.SHAPES)
        self.cfg = self.reference.build_config(self.shapes[0])
        self.baseline = self._load_baseline()
        roofline_path = task_dir / "roofline.py"
        self.roofline = _load_task_module("_kagent_task_roofline", roofline_path) if roofline_path.exists() else None
        correctness = self.problem.get("correctness", {})
        self.threshold = float(correctness.get("threshold", 0.98))
        self.check_seeds = list(correctness.get("seeds", [0, 1, 2]))
        key = "smoke_contexts" if scale == "smoke" else "contexts"
        self.check_contexts = list(correctness.get(key) or [s["context_len"] for s in self.shapes[:2]])
        self.timing_seed = int(self.problem.get("timing_seed", 0))
        # What the cached reference results depend on.
        self.cache_identity = {
            "reference": digest(task_dir / "reference.py"),
            "config": repr(self.cfg),
            "device": device.type,
            "torch": torch.__version__,
        }

    def _load_baseline(self) -> ModuleType | None:
        path = self.dir / "baseline.py"
        if not path.exists():
            return None
        sys.path.insert(0, str(self.dir))  # the baseline may `import reference`
        try:
            return _load_task_module("baseline", path)
        finally:
            sys.path.remove(str(self.dir))

    def init_state(self, context_len: int, seed: int) -> State:
        return self.reference.init_state(self.cfg, context_len, seed, device=self.device)

    def init_token(self, seed: int) -> Hidden:
        return self.reference.init_token(self.cfg, seed, device=self.device)


def clone_state(state: State) -> State:
    return [{k: v.clone() for k, v in layer.items()} for layer in state]


def build_reference(task: Task, cache: DiskCache) -> torch.nn.Module:
    """The reference model with its deterministic weights, built once and cached on disk."""
    Model = task.reference.Model
    key = digest(task.cache_identity["reference"], task.cache_identity["config"])
    weights = cache.load("weights", key, task.device)
    if weights is None:
        model = Model(task.cfg)  # the reference draws its own deterministic weights
        weights = model.state_dict()
        cache.store("weights", key, weights)
        return model.to(task.device).eval()
    if "init_weights" in inspect.signature(Model).parameters:
        with torch.device(task.device):
            model = Model(task.cfg, init_weights=False)
    else:
        model = Model(task.cfg)
    model.load_state_dict(weights, strict=True)
    return model.to(task.device).eval()


def reference_step(model: torch.nn.Module, hidden: Hidden, state: State) -> tuple[Hidden, State]:
    hidden, state = model.step(hidden.clone(), clone_state(state))
    return hidden, state


def layout_of(state: State) -> list[dict[str, list[int]]]:
    """The shapes of a state, layer by layer (the MLA cache grows by a row each step)."""
    return [{name: list(t.shape) for name, t in layer.items()} for layer in state]


def reference_chain(model: torch.nn.Module, task: Task, context_len: int, steps: int) -> dict:
    """The reference's outputs over a chain of steps, each output fed back as the next input."""
    hidden, state = task.init_token(task.timing_seed), task.init_state(context_len, task.timing_seed)
    outputs, layouts = [], []
    for _ in range(steps):
        hidden, state = model.step(hidden, state)
        outputs.append(hidden.clone())
        layouts.append(layout_of(state))
    return {"hidden": torch.stack(outputs), "state": state, "layouts": layouts}


class StepChecker:
    """Validates what a candidate's step returned and compares it with the reference."""

    def __init__(self, task: Task):
        self.task = task

    def unpack(self, returned: Any, expected_state: State,
               layout: list[dict[str, list[int]]] | None = None) -> tuple[Hidden, State]:
        """The (hidden, state) pair, or a CandidateError naming what is wrong with it.

        Shapes come from ``layout`` when given (a step inside a chain), else from
        ``expected_state``; dtypes always from ``expected_state``."""
        cfg, device = self.task.cfg, self.task.device
        if not isinstance(returned, (tuple, list)) or len(returned) != 2:
            raise CandidateError(f"step must return (hidden, state), got {type(returned).__name__}")
        hidden, state = returned
        problem = compare.tensor_problem(hidden, "hidden", (cfg.hidden,), torch.bfloat16, device)
        if problem:
            raise CandidateError(f"step returned a bad {problem}")
        if not isinstance(state, (list, tuple)) or len(state) != len(expected_state):
            raise CandidateError(f"state must be a list of {len(expected_state)} layer dicts")
        for i, (layer, ref_layer) in enumerate(zip(state, expected_state)):
            if not isinstance(layer, dict) or set(layer) != set(ref_layer):
                keys = sorted(layer) if isinstance(layer, dict) else type(layer).__name__
                raise CandidateError(f"state[{i}] must have keys {sorted(ref_layer)}, got {keys}")
            for name, ref in ref_layer.items():
                shape = tuple(layout[i][name]) if layout else tuple(ref.shape)
                problem = compare.tensor_problem(layer[name], f"state[{i}][{name!r}]", shape, ref.dtype, device)
                if problem:
                    raise CandidateError(f"step left a bad {problem}")
        return hidden, list(state)

    def compare(self, hidden_in: Hidden, hidden: Hidden, state: State, expected_hidden: Hidden,
                expected_state: State) -> dict:
        """Cosine of the next hidden, of the step's own contribution (out - in), and of every
        state tensor. The delta matters on chained steps: there the residual stream is a
        running sum that dominates the hidden, so skipped work can hide in its cosine."""
        metrics: dict[str, float] = {}
        nonfinite = []
        tensors = [("hidden", hidden, expected_hidden)]
        for i, (layer, ref_layer) in enumerate(zip(state, expected_state)):
            tensors += [(f"L{i}.{name}", layer[name], ref) for name, ref in ref_layer.items()]
        for name, got, ref in tensors:
            if not compare.is_finite(got):
                nonfinite.append(name)
            metrics[name] = compare.cosine(got, ref)
        base = hidden_in.float()
        metrics["delta"] = compare.cosine(hidden.float() - base, expected_hidden.float() - base)
        worst = min(metrics, key=metrics.get)
        below = sorted(n for n, v in metrics.items() if v < self.task.threshold)
        return {"min_cosine": metrics[worst], "worst": worst, "below_threshold": below,
                "nonfinite": nonfinite, "cosines": {k: round(v, 6) for k, v in metrics.items()},
                "passed": not below and not nonfinite}


def _fail_reason(label: str, result: dict, threshold: float) -> str:
    if result["nonfinite"]:
        return f"{label}: non-finite values in {', '.join(result['nonfinite'][:5])}"
    names = ", ".join(f"{n} {result['cosines'][n]:.4f}" for n in result["below_threshold"][:6])
    return f"{label}: cosine below {threshold} for {names}"


class MegaEvaluation(EvaluationBase):
    """One evaluation of a solution (or, in A/A mode, of the baseline against itself)."""

    # -- everything trusted happens before the candidate is imported ----------------------
    def prepare(self) -> None:
        self.task = Task(Path(self.job["task_dir"]), self.job["scale"], self.device)
        task = self.task
        wanted = self.job.get("contexts")
        self.timing_shapes = [s for s in task.shapes if not wanted or s["context_len"] in wanted]
        if not self.timing_shapes:
            known = [s["context_len"] for s in task.shapes]
            raise TaskError(f"no shape with context in {wanted}; this scale has contexts {known}")
        self.phase("load_task")
        with torch.no_grad():
            self.reference = build_reference(task, self.cache)
            self.phase("reference_weights")
            self.weights = self.reference.state_dict()
            self.cases = self._expected_cases()
            self.chains = {
                s["context_len"]: self._expected_chain(s["context_len"], s["steps"]) for s in self.timing_shapes
            }
        self.phase("reference_outputs")

    def _expected_cases(self) -> list[Case]:
        task, cases = self.task, []
        for context_len in task.check_contexts:
            for seed in task.check_seeds:
                key = digest(task.cache_identity, "case", context_len, seed)
                out = self.cache.get_or_build(
                    "outputs", key, self.device,
                    lambda: reference_step(self.reference, task.init_token(seed), task.init_state(context_len, seed)))
                cases.append(Case(f"seed {seed} ctx {context_len}", context_len, seed, *out))
        # Seeds drawn now: no candidate can have their answers ready.
        count = int(self.job.get("hidden_seeds", 2))
        self.hidden_seeds = [1000 + secrets.randbelow(1 << 30) for _ in range(count)]
        for i, seed in enumerate(self.hidden_seeds):
            context_len = task.check_contexts[i % len(task.check_contexts)]
            out = reference_step(self.reference, task.init_token(seed), task.init_state(context_len, seed))
            cases.append(Case(f"hidden seed #{i + 1} ctx {context_len}", context_len, seed, *out))
        return cases

    def _expected_chain(self, context_len: int, steps: int) -> dict:
        key = digest(self.task.cache_identity, "chain", context_len, steps, self.task.timing_seed)
        return self.cache.get_or_build("outputs", key, self.device,
                                       lambda: reference_chain(self.reference, self.task, context_len, steps))

    # -- the candidate ---------------------------------------------------------------------
    def load_solution(self, label: str) -> torch.nn.Module:
        if self.job["mode"] == "aa":
            module = self.task.baseline or self.task.reference
        else:
            path = Path(self.job["solution"])
            sys.path.insert(0, str(path.parent))  # its own helper modules
            module = candidate_call("importing the solution", lambda: load_module("solution", path))
        Model = getattr(module, "Model", None)
        if Model is None:
            raise CandidateError(f"{label} defines no class Model")
        with torch.device(self.device):
            model = candidate_call(f"{label} Model(cfg)", lambda: Model(self.task.cfg))
        candidate_call(f"{label} load_state_dict (strict)", lambda: model.load_state_dict(self.weights, strict=True))
        model = candidate_call(f"{label} .to(device)", lambda: model.to(self.device))
        return model.eval()

    def load_baseline(self) -> torch.nn.Module:
        Model = (self.task.baseline or self.task.reference).Model
        with torch.device(self.device):
            model = Model(self.task.cfg)
        model.load_state_dict(self.weights, strict=True)
        return model.to(self.device).eval()

    def run(self) -> None:
        self.prepare()
        with torch.no_grad():
            self.baseline = self.load_baseline()
            try:
                self.candidate = self.load_solution("the solution")
            except CandidateError as err:
                self.channel.send("check", name="load", status="error", reason=err.message, details=err.details)
                return
            self.channel.send("check", name="load", status="pass", reason="imported, constructed, weights loaded")
            self.phase("load_solution")
            if not self.correctness():
                return
            if self.job["mode"] == "check":
                return
            self.performance()

    def _candidate_step(self, hidden: Hidden, state: State, expected_state: State) -> tuple[Hidden, State]:
        returned = candidate_call("step", lambda: self.candidate.step(hidden, state))
        return self.checker.unpack(returned, expected_state)

    def correctness(self) -> bool:
        task = self.task
        self.checker = StepChecker(task)
        try:
            # 1. Fresh single steps: fixed seeds, then seeds drawn for this run only.
            for group in ("fixed_seeds", "hidden_seeds"):
                cases = [c for c in self.cases if c.label.startswith("hidden") == (group == "hidden_seeds")]
                results = []
                for case in cases:
                    hidden_in = task.init_token(case.seed)
                    hidden, state = self._candidate_step(hidden_in.clone(), task.init_state(case.context_len, case.seed),
                                                         case.expected_state)
                    result = self.checker.compare(hidden_in, hidden, state, case.expected_hidden, case.expected_state)
                    results.append({"case": case.label, **result})
                    if not result["passed"]:
                        return self.send_check(group, "fail", _fail_reason(case.label, result, task.threshold),
                                                cases=results)
                worst = min(r["min_cosine"] for r in results)
                if not self.send_check(group, "pass", f"{len(results)} cases, min cosine {worst:.5f}",
                                        cases=results, seeds=[c.seed for c in cases]):
                    return False
            self.phase("check_single_steps")
            # 2. Same input and state buffers, overwritten in place with another seed's values.
            if not self._check_overwrite():
                return False
            # 3. A chain of steps like the timed ones, feeding each output back in.
            shape = min(self.timing_shapes, key=lambda s: s["context_len"])
            if not self._check_chain(shape):
                return False
            self.phase("check_chained")
            return True
        except CandidateError as err:
            return self.send_check("step", "error", err.message, details=err.details)

    def _check_overwrite(self) -> bool:
        task = self.task
        first = next(c for c in self.cases if not c.label.startswith("hidden"))
        second = next(c for c in self.cases if c.label.startswith("hidden") and c.context_len == first.context_len)
        hidden = task.init_token(first.seed)
        state = task.init_state(first.context_len, first.seed)
        originals = [dict(layer) for layer in state]  # the very tensor objects passed in
        results = []
        for case in (first, second):
            if case is second:
                hidden.copy_(task.init_token(second.seed))
                fresh = task.init_state(second.context_len, second.seed)
                for layer, original, values in zip(state, originals, fresh):
                    for name, tensor in original.items():
                        tensor.copy_(values[name])
                    layer.clear()
                    layer.update(original)
            hidden_in = hidden.clone()
            out_hidden, out_state = self._candidate_step(hidden, state, case.expected_state)
            result = self.checker.compare(hidden_in, out_hidden, out_state, case.expected_hidden, case.expected_state)
            results.append({"case": case.label, **result})
            if not result["passed"]:
                reason = _fail_reason(f"second call on the same buffers ({case.label})" if case is second
                                      else case.label, result, task.threshold)
                return self.send_check("overwrite_in_place", "fail", reason, cases=results)
        return self.send_check("overwrite_in_place", "pass",
                                "a second call on the same buffers, overwritten in place, is still right",
                                cases=results)

    def _check_chain(self, shape: dict) -> bool:
        player = ChainPlayer("candidate", self, shape["context_len"], shape["steps"])
        player.begin_round(0)
        for i in range(shape["steps"]):
            player.step(i)
            player.after_step(i)
        timing.synchronize(self.device)
        player.end_round(0)
        return self._chain_verdict([player], "chained_steps")

    def _chain_verdict(self, players: list["ChainPlayer"], name: str) -> bool:
        failures = [f for p in players for f in p.failures]
        worst = min(p.worst for p in players)
        if failures:
            return self.send_check(name, "fail", failures[0], worst_cosine=worst)
        contexts = sorted({p.context_len for p in players})
        return self.send_check(name, "pass", f"chains at ctx {contexts} match the reference at every step "
                                f"(min cosine {worst:.5f})", worst_cosine=worst)

    # -- timing ----------------------------------------------------------------------------
    def performance(self) -> None:
        rounds = int(self.job.get("rounds") or 4)
        warmup = int(self.job.get("warmup") or 2)
        per_shape = []
        bw = self.bandwidth() if self.task.roofline is not None else None
        clocks_before = self.clocks()
        for shape in self.timing_shapes:
            ctx, steps = shape["context_len"], shape["steps"]
            base = ChainPlayer("baseline", self, ctx, steps, model=self.baseline)
            cand = ChainPlayer("candidate", self, ctx, steps)
            try:
                timing.run_interleaved(self.device, [base, cand], rounds=1, steps=warmup)
                samples = timing.run_interleaved(self.device, [base, cand], rounds=rounds, steps=steps)
            except CandidateError as err:
                self.send_check("timed_steps", "error", f"ctx {ctx}: {err.message}", details=err.details)
                return
            if not self._chain_verdict([cand], f"timed_chain_ctx_{ctx}"):
                return
            stats = {"baseline": timing.summarize(samples["baseline"]),
                     "candidate": timing.summarize(samples["candidate"])}
            result = {"label": f"ctx {ctx}", "context_len": ctx, "steps": steps, "rounds": rounds, **stats,
                      **timing.speedup_with_noise(samples["baseline"], samples["candidate"]),
                      "baseline_chain_ok": not base.failures}
            if self.task.roofline is not None and bw:
                nbytes = int(self.task.roofline.bytes_per_step(self.task.cfg, ctx))
                floor_ms = nbytes / bw["bytes_per_s"] * 1e3
                result["roofline"] = {
                    "bytes_per_step": nbytes, "floor_ms": floor_ms,
                    "candidate_fraction": floor_ms / stats["candidate"]["median_ms"],
                    "baseline_fraction": floor_ms / stats["baseline"]["median_ms"],
                }
            self.channel.send("timing", **result)
            per_shape.append(result)
        clocks_after = self.clocks()
        self.phase("timing")
        self.channel.send("score", geomean_speedup=timing.geomean([r["speedup"] for r in per_shape]),
                          clocks_before=clocks_before, clocks_after=clocks_after)
        self._count_launches()
        self.phase("launches")

    def _count_launches(self) -> None:
        shape = self.timing_shapes[0]
        hidden = self.task.init_token(self.task.timing_seed)
        state = self.task.init_state(shape["context_len"], self.task.timing_seed)
        for who, model in (("baseline", self.baseline), ("candidate", self.candidate)):
            self.report_launches(who, lambda: model.step(hidden.clone(), clone_state(state)),
                                 context_len=shape["context_len"])


class ChainPlayer:
    """Runs a chain of steps from the timing seed's state, keeping each output for validation."""

    def __init__(self, name: str, evaluation: MegaEvaluation, context_len: int, steps: int,
                 model: torch.nn.Module | None = None):
        self.name = name
        self.evaluation = evaluation
        self.is_candidate = model is None
        self.model = model if model is not None else evaluation.candidate
        self.context_len = context_len
        self.steps = steps
        task = evaluation.task
        self.template_state = task.init_state(context_len, task.timing_seed)
        self.template_hidden = task.init_token(task.timing_seed)
        self.expected = evaluation.chains[context_len]
        self.failures: list[str] = []
        self.worst = 1.0

    def begin_round(self, round_index: int) -> None:
        self.hidden = self.template_hidden.clone()
        self.state = clone_state(self.template_state)
        self.outputs: list[Hidden] = []

    def step(self, step_index: int) -> None:
        # Only the call itself is timed; its result is checked in after_step.
        if self.is_candidate:
            self.returned = candidate_call("step", lambda: self.model.step(self.hidden, self.state))
        else:
            self.returned = self.model.step(self.hidden, self.state)

    def after_step(self, step_index: int) -> None:
        self.hidden, self.state = self.evaluation.checker.unpack(
            self.returned, self.expected["state"], self.expected["layouts"][step_index])
        # A copy: the step may reuse its output buffer.
        self.outputs.append(self.hidden.clone())

    def end_round(self, round_index: int) -> None:
        if len(self.outputs) != self.steps:
            return  # warm-up rounds are shorter than a chain
        threshold = self.evaluation.task.threshold
        expected_hidden = self.expected["hidden"]
        for i, out in enumerate(self.outputs):
            given = self.outputs[i - 1] if i else self.template_hidden
            expected_given = expected_hidden[i - 1] if i else self.template_hidden
            cos_h = compare.cosine(out, expected_hidden[i])
            cos_d = compare.cosine(out.float() - given.float(), expected_hidden[i].float() - expected_given.float())
            self.worst = min(self.worst, cos_h, cos_d)
            if not compare.is_finite(out):
                self.failures.append(f"ctx {self.context_len} step {i + 1} of the chain: non-finite hidden")
                return
            if min(cos_h, cos_d) < threshold:
                self.failures.append(f"ctx {self.context_len} round {round_index + 1} step {i + 1} of the chain: "
                                     f"cosine {cos_h:.4f} (hidden), {cos_d:.4f} (step delta), "
                                     f"below {threshold}")
                return
        given = self.outputs[-2] if self.steps > 1 else self.template_hidden
        result = self.evaluation.checker.compare(given, self.outputs[-1], self.state,
                                                 expected_hidden[-1], self.expected["state"])
        self.worst = min(self.worst, result["min_cosine"])
        if not result["passed"]:
            self.failures.append(_fail_reason(f"ctx {self.context_len} state after the chain", result, threshold))
