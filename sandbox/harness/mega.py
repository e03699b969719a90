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
    margin: float | None  # the reference's decision margin on this case (None: the task has none)


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
        problem_file = task_dir / "problem.yaml"
        try:
            self.problem = (yaml.safe_load(problem_file.read_text()) or {}) if problem_file.exists() else {}
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
        # Optional: how close a reference step's discrete choices came to a tie, and the
        # least margin at which a mismatch counts against a solution.
        self.decision_margin = getattr(self.reference, "decision_margin", None)
        self.min_margin = float(correctness.get("min_decision_margin", 0.0))
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
    # Skip the random init when the reference allows it: the cached weights replace it.
    skip = "init_weights" in inspect.signature(Model).parameters
    if skip:
        with torch.device(task.device):
            model = Model(task.cfg, init_weights=False)
    else:
        model = Model(task.cfg)
    model = model.to(task.device)  # also what a module built on an explicit device left behind
    model.load_state_dict(weights, strict=True)
    return model.eval()


def reference_step(model: torch.nn.Module, hidden: Hidden, state: State) -> tuple[Hidden, State]:
    """The reference's step on copies, so the inputs stay as they were."""
    return model.step(hidden.clone(), clone_state(state))


def reference_case(task: Task, model: torch.nn.Module, hidden: Hidden, state: State) -> tuple:
    """(hidden, state, decision margin) of one reference step."""
    out_hidden, out_state = reference_step(model, hidden, state)
    margin = float(task.decision_margin(model)) if task.decision_margin else None
    return out_hidden, out_state, margin


# A state's layout: per layer, each tensor's shape and dtype.
Layout = list[dict[str, tuple[tuple[int, ...], torch.dtype]]]


def layout_of(state: State) -> Layout:
    return [{name: (tuple(t.shape), t.dtype) for name, t in layer.items()} for layer in state]


def grown(layout: Layout, growth: list[dict[str, tuple[int, ...]]], steps: int) -> Layout:
    """The layout after ``steps`` more steps, each adding ``growth`` (the MLA cache's row)."""
    return [{name: (tuple(d + steps * g for d, g in zip(shape, layer_growth[name])), dtype)
             for name, (shape, dtype) in layer.items()} for layer, layer_growth in zip(layout, growth)]


class StepChecker:
    """Validates what a candidate's step returned and compares it with the reference."""

    def __init__(self, task: Task, expected_hidden: Hidden):
        self.task = task
        self.hidden_layout = (tuple(expected_hidden.shape), expected_hidden.dtype)

    def unpack(self, returned: Any, layout: Layout) -> tuple[Hidden, State]:
        """The (hidden, state) pair, or a CandidateError naming what is wrong with it."""
        device = self.task.device
        if not isinstance(returned, (tuple, list)) or len(returned) != 2:
            raise CandidateError(f"step must return (hidden, state), got {type(returned).__name__}")
        hidden, state = returned
        shape, dtype = self.hidden_layout
        problem = compare.tensor_problem(hidden, "hidden", shape, dtype, device)
        if problem:
            raise CandidateError(f"step returned a bad {problem}")
        if not isinstance(state, (list, tuple)) or len(state) != len(layout):
            raise CandidateError(f"state must be a list of {len(layout)} layer dicts")
        for i, (layer, want) in enumerate(zip(state, layout)):
            if not isinstance(layer, dict) or set(layer) != set(want):
                keys = sorted(layer) if isinstance(layer, dict) else type(layer).__name__
                raise CandidateError(f"state[{i}] must have keys {sorted(want)}, got {keys}")
            for name, (shape, dtype) in want.items():
                problem = compare.tensor_problem(layer[name], f"state[{i}][{name!r}]", shape, dtype, device)
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


def _fail_reason(label: str, result: dict, threshold: float, margin: float | None = None,
                 min_margin: float = 0.0) -> str:
    if result["nonfinite"]:
        return f"{label}: non-finite values in {', '.join(result['nonfinite'][:5])}"
    names = ", ".join(f"{n} {result['cosines'][n]:.4f}" for n in result["below_threshold"][:6])
    reason = f"{label}: cosine below {threshold} for {names}"
    if margin is not None and margin < min_margin:
        reason += (f" (note: the reference's routing is {margin:.2%} from a tie here, so rounding alone can "
                   "swap an expert: keep the router input and logits accurate)")
    return reason


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
        first = self.cases[0]
        before = layout_of(task.init_state(first.context_len, first.seed))
        after = layout_of(first.expected_state)
        self.growth = [{name: tuple(a - b for a, b in zip(after[i][name][0], shape))
                        for name, (shape, _) in layer.items()} for i, layer in enumerate(before)]
        self.checker = StepChecker(task, first.expected_hidden)
        self.phase("reference_outputs")

    def _expected_cases(self) -> list[Case]:
        task, cases = self.task, []
        for context_len in task.check_contexts:
            for seed in task.check_seeds:
                key = digest(task.cache_identity, "case", context_len, seed)
                out = self.cache.get_or_build("outputs", key, self.device, lambda: self._reference_case(context_len, seed))
                cases.append(Case(f"seed {seed} ctx {context_len}", context_len, seed, *out))
        # Seeds drawn now: no candidate can have their answers ready. A seed whose expert
        # routing sits on a near-tie is drawn again: there an honest kernel's rounding could
        # swap an expert, and a secret seed must not fail a correct solution by bad luck.
        count = int(self.job.get("hidden_seeds", 2))
        self.hidden_seeds, self.redrawn_seeds = [], 0
        while len(self.hidden_seeds) < count:
            seed = 1000 + secrets.randbelow(1 << 30)
            context_len = task.check_contexts[len(self.hidden_seeds) % len(task.check_contexts)]
            out = self._reference_case(context_len, seed)
            if out[2] is not None and out[2] < task.min_margin:
                self.redrawn_seeds += 1
                if self.redrawn_seeds > 50 * count:
                    raise TaskError(f"no seed with a decision margin of {task.min_margin} in "
                                    f"{self.redrawn_seeds} draws: lower correctness.min_decision_margin")
                continue
            self.hidden_seeds.append(seed)
            cases.append(Case(f"hidden seed #{len(self.hidden_seeds)} ctx {context_len}", context_len, seed, *out))
        return cases

    def _reference_case(self, context_len: int, seed: int) -> tuple:
        task = self.task
        return reference_case(task, self.reference, task.init_token(seed), task.init_state(context_len, seed))

    def layout_after(self, context_len: int, steps: int) -> Layout:
        """The state layout after ``steps`` steps from a fresh state of ``context_len``."""
        start = layout_of(self.task.init_state(context_len, self.task.timing_seed))
        return grown(start, self.growth, steps)

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
        # Built as a plain harness would (no device context: a solution may seed CPU
        # generators while it builds), moved, then given the reference's weights.
        model = candidate_call(f"{label} Model(cfg)", lambda: Model(self.task.cfg))
        model = candidate_call(f"{label} .to(device)", lambda: model.to(self.device))
        candidate_call(f"{label} load_state_dict (strict)", lambda: model.load_state_dict(self.weights, strict=True))
        return model.eval()

    def load_baseline(self) -> torch.nn.Module:
        with torch.device(self.device):  # the trusted baseline allocates straight on the device
            model = (self.task.baseline or self.task.reference).Model(self.task.cfg)
        model = model.to(self.device)  # also what a module built on an explicit device left behind
        model.load_state_dict(self.weights, strict=True)
        return model.eval()

    def run(self) -> None:
        self.prepare()
        with torch.no_grad():
            self.baseline = self.load_baseline()
            # Before any candidate code runs: what the harness times and judges with.
            self.watch_integrity({"baseline": self.baseline, "reference": self.reference})
            # Also before: what these leave in the cache can be trusted (see seal_cache).
            timed = self.job["mode"] != "check"
            self.bw = self.bandwidth() if timed and self.task.roofline is not None else None
            if timed:
                baseline_key = digest(self.task.cache_identity, "baseline launches", self.environment.get("gpu_name"),
                                      self.timing_shapes[0]["context_len"],
                                      (self.task.dir / "baseline.py").exists() and digest(self.task.dir / "baseline.py"))
                self.report_first_shape_launches("baseline", self.baseline, baseline_key)
            self.seal_cache()
            try:
                self.candidate = self.load_solution("the solution")
            except CandidateError as err:
                self.send_check("load", "error", err.message, details=err.details)
                return
            self.send_check("load", "pass", "imported, constructed, weights loaded")
            self.phase("load_solution")
            if not self.integrity_holds("after import"):
                return
            if not self.correctness() or not self.integrity_holds("after the correctness checks"):
                return
            if self.job["mode"] != "check":
                self.performance()

    def correctness(self) -> bool:
        """Single steps, the overwrite check, and (check-only mode) an untimed chain.

        In eval mode the chains are validated as they are timed (see ``performance``)."""
        current = "fixed_seeds"
        self.keep_alive: list = []
        try:
            for current in ("fixed_seeds", "hidden_seeds"):
                if not self._check_single_steps(current):
                    return False
            self.phase("check_single_steps")
            current = "overwrite_in_place"
            if not self._check_overwrite():
                return False
            self.keep_alive.clear()
            if self.job["mode"] == "check":
                current = "chained_steps"
                shape = min(self.timing_shapes, key=lambda s: s["context_len"])
                player = ChainPlayer("candidate", self, self.candidate, shape["context_len"], shape["steps"])
                timing.run_untimed(self.device, player, shape["steps"])
                if not self.send_check(current, *player.verdict()):
                    return False
                self.phase("check_chained")
            return True
        except CandidateError as err:
            return self.send_check(current, "error", err.message, details=err.details)

    def _check_single_steps(self, group: str) -> bool:
        """Fresh single steps from the fixed seeds, or from seeds drawn for this run only."""
        task = self.task
        cases = [c for c in self.cases if c.label.startswith("hidden") == (group == "hidden_seeds")]
        results = []
        for case in cases:
            hidden_in = task.init_token(case.seed)
            args = (hidden_in.clone(), task.init_state(case.context_len, case.seed))
            returned = candidate_call("step", lambda: self.candidate.step(*args))
            # Inputs and outputs kept alive: every case has addresses of its own, so an answer
            # cached by pointer can only go stale in the overwrite check.
            self.keep_alive.append((args, returned))
            hidden, state = self.checker.unpack(returned, layout_of(case.expected_state))
            result = self.checker.compare(hidden_in, hidden, state, case.expected_hidden, case.expected_state)
            results.append({"case": case.label, "decision_margin": case.margin, **result})
            if not result["passed"]:
                return self.send_check(group, "fail", _fail_reason(case.label, result, task.threshold, case.margin,
                                                                   task.min_margin), cases=results)
        worst = min(r["min_cosine"] for r in results)
        extra = {"redrawn_seeds": self.redrawn_seeds} if group == "hidden_seeds" else {}
        return self.send_check(group, "pass", f"{len(results)} cases, min cosine {worst:.5f}",
                               cases=results, seeds=[c.seed for c in cases], **extra)

    def _check_overwrite(self) -> bool:
        """A second call on the very same input and state tensors, overwritten in place with
        another seed's values: an answer cached by pointer, id() or call count is stale."""
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
            returned = candidate_call("step", lambda: self.candidate.step(hidden, state))
            out_hidden, out_state = self.checker.unpack(returned, layout_of(case.expected_state))
            result = self.checker.compare(hidden_in, out_hidden, out_state, case.expected_hidden, case.expected_state)
            results.append({"case": case.label, **result})
            if not result["passed"]:
                label = f"second call on the same buffers ({case.label})" if case is second else case.label
                return self.send_check("overwrite_in_place", "fail", _fail_reason(label, result, task.threshold),
                                       cases=results)
        return self.send_check("overwrite_in_place", "pass",
                               "a second call on the same buffers, overwritten in place, is still right",
                               cases=results)

    # -- timing ----------------------------------------------------------------------------
    def performance(self) -> None:
        rounds = int(self.job.get("rounds") or 4)
        warmup = int(self.job.get("warmup") or 2)
        per_shape = []
        bw = self.bw
        clocks_before = self.clocks()
        for shape in self.timing_shapes:
            ctx, steps = shape["context_len"], shape["steps"]
            base = ChainPlayer("baseline", self, self.baseline, ctx, steps)
            cand = ChainPlayer("candidate", self, self.candidate, ctx, steps)
            name = f"timed_chain_ctx_{ctx}"
            walls: list[timing.RoundWall] = []
            try:
                timing.run_interleaved(self.device, [base, cand], rounds=1, steps=warmup)
                samples = timing.run_interleaved(self.device, [base, cand], rounds=rounds, steps=steps, walls=walls)
            except CandidateError as err:
                self.send_check(name, "error", err.message, details=err.details)
                return
            if not self.integrity_holds(f"while timed at ctx {ctx}") or not self.send_check(name, *cand.verdict()):
                return
            # On the CPU every interval brackets the whole call on the host: nothing can run
            # outside it, and the host's own scheduling noise would only cause false alarms.
            if not self.no_hidden_work(cand, walls, f"ctx {ctx}",
                                       synced_steps=min(timing.SYNCED_STEPS, steps)):
                return
            stats = {"baseline": timing.summarize(samples["baseline"]),
                     "candidate": timing.summarize(samples["candidate"])}
            result = {"label": f"ctx {ctx}", "context_len": ctx, "steps": steps, "rounds": rounds, **stats,
                      **timing.speedup_with_noise(samples["baseline"], samples["candidate"])}
            if bw:
                nbytes = int(self.task.roofline.bytes_per_step(self.task.cfg, ctx))
                floor_ms = nbytes / bw["bytes_per_s"] * 1e3
                result["roofline"] = {
                    "bytes_per_step": nbytes, "floor_ms": floor_ms,
                    "candidate_fraction": floor_ms / stats["candidate"]["median_ms"],
                    "baseline_fraction": floor_ms / stats["baseline"]["median_ms"],
                }
                impossible = timing.physics_violation(stats["candidate"]["median_ms"], nbytes, bw["bytes_per_s"])
                if impossible:
                    self.send_check("physics", "fail", f"ctx {ctx}: {impossible}", roofline=result["roofline"])
                    return
            self.channel.send("timing", **result)
            per_shape.append(result)
        self.phase("timing")
        if not self.integrity_holds("after timing"):
            return
        self.channel.send("score", geomean_speedup=timing.geomean([r["speedup"] for r in per_shape]),
                          clocks_before=clocks_before, clocks_after=self.clocks())
        self.report_first_shape_launches("candidate", self.candidate, None)
        self.phase("launches")

    def report_first_shape_launches(self, who: str, model: torch.nn.Module, cache_key: str | None) -> None:
        """Launches of one step of ``model`` at the first timed context, from the timing seed."""
        context_len = self.timing_shapes[0]["context_len"]
        hidden = self.task.init_token(self.task.timing_seed)
        state = self.task.init_state(context_len, self.task.timing_seed)
        self.report_launches(who, lambda: model.step(hidden.clone(), clone_state(state)), cache_key=cache_key,
                             context_len=context_len)


class ChainPlayer:
    """Steps a model through a chain from the timing seed's state, each output fed back in.

    For the candidate, the first chain of a series is validated step by step against the
    reference run from the candidate's own input and state before that step (a copy taken
    outside the timed interval): one step from an identical fed state, as in the fresh
    checks, so a near-tie in expert routing cannot make honest drift look like an error,
    while work skipped on chained steps shows. Every later chain must repeat the first.
    """

    def __init__(self, name: str, evaluation: MegaEvaluation, model: torch.nn.Module, context_len: int,
                 steps: int):
        self.name = name
        self.evaluation = evaluation
        self.model = model
        self.is_candidate = name == "candidate"
        self.context_len = context_len
        self.steps = steps
        task = evaluation.task
        self.template_state = task.init_state(context_len, task.timing_seed)
        self.template_hidden = task.init_token(task.timing_seed)
        start = layout_of(self.template_state)
        self.layouts = [grown(start, evaluation.growth, i + 1) for i in range(steps)]
        self.first_chain: list[Hidden] | None = None
        self.failures: list[str] = []
        self.excused: list[int] = []  # chained steps whose mismatch sat on a routing near-tie
        self.worst = 1.0
        self.validated_chains = 0

    def begin_round(self, round_index: int) -> None:
        self.hidden = self.template_hidden.clone()
        self.state = clone_state(self.template_state)
        self.outputs: list[Hidden] = []
        # Inputs before each step, kept only for the chain that is validated step by step.
        self.snapshots = [(self.hidden.clone(), clone_state(self.state))] if self._teacher_forced() else None

    def _teacher_forced(self) -> bool:
        return self.is_candidate and self.first_chain is None

    def step(self, step_index: int) -> None:
        # Only the call itself is timed; what it returned is checked in after_step.
        if self.is_candidate:
            self.returned = candidate_call("step", lambda: self.model.step(self.hidden, self.state))
        else:
            self.returned = self.model.step(self.hidden, self.state)

    def after_step(self, step_index: int) -> None:
        if not self.is_candidate:
            self.hidden, self.state = self.returned
            return
        self.hidden, self.state = self.evaluation.checker.unpack(self.returned, self.layouts[step_index])
        self.outputs.append(self.hidden.clone())  # a copy: the step may reuse its output buffer
        if self.snapshots is not None:
            self.snapshots.append((self.outputs[-1], clone_state(self.state)))

    def end_round(self, round_index: int) -> None:
        if not self.is_candidate or len(self.outputs) != self.steps:
            return  # the baseline is trusted; warm-up chains are shorter than a chain
        if self.snapshots is not None:
            self._validate_against_reference()
            self.first_chain = self.outputs
        else:
            self._validate_against_first_chain()
        self.validated_chains += 1

    def _fail(self, message: str) -> None:
        if not self.failures:
            self.failures.append(message)

    def _validate_against_reference(self) -> None:
        evaluation, task = self.evaluation, self.evaluation.task
        for i in range(self.steps):
            hidden_in, state_in = self.snapshots[i]
            hidden_out, state_out = self.snapshots[i + 1]
            expected_hidden, expected_state, margin = reference_case(task, evaluation.reference, hidden_in, state_in)
            result = evaluation.checker.compare(hidden_in, hidden_out, state_out, expected_hidden, expected_state)
            if not result["passed"] and not result["nonfinite"] and margin is not None and margin < task.min_margin:
                # A near-tie in the reference's own routing at this state: rounding decides
                # which expert wins, so a mismatch here says nothing about the solution.
                self.excused.append(i + 1)
                continue
            self.worst = min(self.worst, result["min_cosine"])
            if not result["passed"]:
                self._fail(_fail_reason(f"ctx {self.context_len} step {i + 1} of a chain", result, task.threshold))
                return
        if len(self.excused) > max(1, self.steps // 4):
            self._fail(f"ctx {self.context_len}: {len(self.excused)} of {self.steps} chained steps mismatch the "
                       "reference at near-ties of its expert routing: too many to excuse")
        self.snapshots = None

    def _validate_against_first_chain(self) -> None:
        threshold = self.evaluation.task.threshold
        for i, (out, first) in enumerate(zip(self.outputs, self.first_chain)):
            cos = compare.cosine(out, first)
            self.worst = min(self.worst, cos)
            if cos < threshold or not compare.is_finite(out):
                self._fail(f"ctx {self.context_len} step {i + 1}: a later timed chain gave another answer than "
                           f"the first (cosine {cos:.4f}) from the same inputs")
                return

    def verdict(self) -> tuple[str, str]:
        """(status, reason) for the chains this player ran."""
        if self.failures:
            return "fail", self.failures[0]
        excused = (f"; steps {self.excused} differ at a near-tie of the reference's routing and are not counted"
                   if self.excused else "")
        return "pass", (f"{self.validated_chains} chain(s) of {self.steps} steps at ctx {self.context_len}: "
                        f"each step matches the reference from the same state (min cosine {self.worst:.5f}){excused}")
