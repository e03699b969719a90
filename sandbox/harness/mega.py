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

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml

from . import building, compare, lease, timing
from .base import EvaluationBase, arena_bytes_for
from .exchange import Layout as TensorLayout
from .loading import CandidateError, DiskCache, TaskError, digest, load_module, to_device

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
    salient: bool = False  # starts from the reference's salient_state rather than init_state's draw
    # A salient case's (hidden, state), kept: making it costs about a reference step. Other
    # cases draw theirs again from the seed when needed.
    inputs: list | None = None


def _load_task_module(name: str, path: Path) -> ModuleType:
    try:
        return load_module(name, path)
    except Exception as err:
        raise TaskError(f"cannot load the task's {path.name}: {type(err).__name__}: {err}") from err


# What a task's reference.py must define: the config from a shape, the inputs from a seed,
# and the model whose step(hidden, state) is the task (kagent's layout and the public board's).
REFERENCE_NAMES = ("build_config", "init_state", "init_token", "Model")


def _check_reference(reference: ModuleType) -> None:
    missing = [n for n in REFERENCE_NAMES if not callable(getattr(reference, n, None))]
    if not missing and not callable(getattr(reference.Model, "step", None)):
        missing = ["Model.step"]
    if missing:
        raise TaskError(
            f"the task's reference.py defines no {', '.join(missing)}: kagent grades a stateful "
            "decode step (build_config(shape), init_state(cfg, context_len, seed), "
            "init_token(cfg, seed), Model(cfg).step(hidden, state))"
        )


def _shapes_of(module: ModuleType, scale: str) -> list[dict]:
    """The shapes of the scale: each a dict with at least context_len and steps (the public
    board's add what its build_config reads, such as n_experts)."""
    smoke = getattr(module, "SMOKE_SHAPES", None)
    if scale == "smoke" and not smoke:
        # The public board's folders have only their real sizes.
        raise TaskError("this task defines no smoke scale (SMOKE_SHAPES in shapes.py): evaluate it with --scale full")
    shapes = smoke if scale == "smoke" else getattr(module, "SHAPES", None)
    if not isinstance(shapes, (list, tuple)) or not shapes:
        raise TaskError("the task's shapes.py defines no SHAPES (a list of dicts with context_len and steps)")
    for shape in shapes:
        if not (isinstance(shape, dict) and all(isinstance(shape.get(k), int) for k in ("context_len", "steps"))):
            raise TaskError(
                f"a shape of the task's shapes.py must be a dict with integer context_len and steps, "
                f"not {str(shape)[:120]}"
            )
    return [dict(shape) for shape in shapes]


def _number(key: str, value: Any) -> float:
    """A number of the task's problem.yaml, or one clear error that names its key."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TaskError(f"the task's problem.yaml: {key} must be a number, not {value!r}") from None


def _takes_device(function: Any) -> bool:
    """Whether ``function`` has a ``device`` parameter that can be passed by name."""
    return _takes(function, "device")


def _takes(function: Any, name: str) -> bool:
    """Whether ``function`` has a parameter ``name`` that can be passed by name."""
    try:
        parameter = inspect.signature(function).parameters.get(name)
    except (TypeError, ValueError):  # no signature to read: called as the public board calls it
        return False
    return parameter is not None and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)


def _check_inputs(name: str, value: Any) -> None:
    """The reference's inputs as the evaluation exchanges and compares them: the token a
    tensor, the state a list with one dict of tensors per layer."""
    if name == "init_token":
        good = isinstance(value, torch.Tensor)
        want = "a tensor"
    else:
        good = isinstance(value, list) and all(
            isinstance(layer, dict)
            and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in layer.items())
            for layer in value
        )
        want = "a list with one dict of tensors (by name) per layer"
    if not good:
        raise TaskError(f"the task's reference.{name} must return {want}, not {type(value).__name__}")


class _NeverRaised(Exception):
    """What a task without screening stops a draw with: nothing."""


class Task:
    """The task folder's modules and grading metadata, loaded from the pristine bundle.

    A folder in the public KernelBench-Mega layout is graded as published: its tolerance
    (tolerance.cos_sim in problem.yaml) and seeds (GRADING_SEEDS in shapes.py) where kagent's
    own keys (correctness.threshold, correctness.seeds) are absent, its own baseline.py, and
    its init_state/init_token as it defines them, without a device parameter.
    """

    def __init__(self, task_dir: Path, scale: str, device: torch.device):
        self.dir = task_dir
        self.device = device
        problem_file = task_dir / "problem.yaml"
        try:
            self.problem = (yaml.safe_load(problem_file.read_text()) or {}) if problem_file.exists() else {}
        except (OSError, yaml.YAMLError) as err:
            raise TaskError(f"cannot read the task's problem.yaml: {err}") from err
        if not isinstance(self.problem, dict):
            raise TaskError(f"the task's problem.yaml must hold a mapping, not {type(self.problem).__name__}")
        self.reference = _load_task_module("reference", task_dir / "reference.py")
        _check_reference(self.reference)
        # kagent's reference draws the inputs on the device it is given; the public board's
        # take no device and choose their own (cuda:0): kagent moves what they return.
        self.draws_on_device = {
            name: _takes_device(getattr(self.reference, name)) for name in ("init_state", "init_token")
        }
        shapes = _load_task_module("_kagent_task_shapes", task_dir / "shapes.py")
        self.shapes: list[dict] = _shapes_of(shapes, scale)
        self.cfg = self._config()
        # The baseline runs in a process of its own (building.mega_spec); the referee only
        # needs to know whether the folder has one.
        self.has_baseline = (task_dir / "baseline.py").exists()
        roofline_path = task_dir / "roofline.py"
        self.roofline = _load_task_module("_kagent_task_roofline", roofline_path) if roofline_path.exists() else None
        correctness = self.problem.get("correctness") or {}
        # The public board's check.py and benchmark.py compare cosines with tolerance.cos_sim.
        board_tolerance = self.problem.get("tolerance")
        board_cosine = board_tolerance.get("cos_sim") if isinstance(board_tolerance, dict) else None
        threshold = correctness.get("threshold")
        if threshold is None:
            threshold = board_cosine if board_cosine is not None else 0.98
        self.threshold = _number("correctness.threshold", threshold)
        board_seeds = getattr(shapes, "GRADING_SEEDS", None)  # the public board keeps its seeds there
        self.check_seeds = list(correctness.get("seeds", board_seeds if board_seeds is not None else [0, 1, 2]))
        key = "smoke_contexts" if scale == "smoke" else "contexts"
        # Without a list, the first two shapes' contexts: those the public board checks.
        self.check_contexts = list(correctness.get(key) or [s["context_len"] for s in self.shapes[:2]])
        # The public timing seed: what tools that profile a step outside an evaluation start
        # from. An evaluation never times from it: a solution that knows the inputs of its timed
        # steps can answer them from a memo (MegaEvaluation.timing_inputs).
        self.timing_seed = int(self.problem.get("timing_seed", 0))
        # Optional: how close a reference step's discrete choices came to a tie, and the
        # least margin at which a mismatch counts against a solution.
        self.decision_margin = getattr(self.reference, "decision_margin", None)
        self.min_margin = _number("correctness.min_decision_margin", correctness.get("min_decision_margin", 0.0))
        # Up to this margin a mismatch may still be a tie that rounding tipped (where the
        # runner-up explains it, StepChecker.judge): drawing clear of min_margin does not
        # make a flip impossible, only rare. On the H200 the task's own bf16 baseline swapped
        # an expert at 2.12% from a salient state (1 secret case of 480).
        self.explained_margin = _number(
            "correctness.max_explained_margin",
            correctness.get("max_explained_margin", EXPLAINED_MARGIN_OVER_MIN_MARGIN * self.min_margin),
        )
        # Optional, together: the margin of each discrete choice, and a way to run the reference
        # with the runner-up taken at one of them; a mismatch at a near-tie is excused only
        # where that explains it (StepChecker.judge).
        self.decision_margins = getattr(self.reference, "decision_margins", None)
        self.runner_up = getattr(self.reference, "runner_up", None)
        # Optional: salient_state(model, hidden, state[, seed]) -> a state from which every part
        # of the step shows in its output or state; cases from it join those from init_state.
        # With a ``seed`` parameter it is given the case's seed, from which it draws where it
        # plants what the step must read (a secret case's are then as secret as its seed).
        self.salient_state = getattr(self.reference, "salient_state", None)
        self.salient_takes_seed = self.salient_state is not None and _takes(self.salient_state, "seed")
        # Optional: decision_rounding(model) -> for each of decision_margins, the margin below
        # which rounding the step's inputs to that decision (the router's logits) to bf16 can
        # swap it; the runner-up excuse holds only below it (and below max_explained_margin).
        self.decision_rounding = getattr(self.reference, "decision_rounding", None)
        # Optional, together: screening(model, min_margin), within which a step raises the
        # reference's NearTie at the first routing choice below min_margin; a secret seed on a
        # near-tie is then drawn again without paying for the rest of its steps.
        screening, near_tie = getattr(self.reference, "screening", None), getattr(self.reference, "NearTie", None)
        both = screening is not None and isinstance(near_tie, type) and issubclass(near_tie, Exception)
        self.screening: Callable[[Any, float], Any] | None = screening if both else None
        self.near_tie_error: type[Exception] = near_tie if both else _NeverRaised  # type: ignore[assignment]
        # What the cached reference results depend on.
        self.cache_identity = {
            "reference": digest(task_dir / "reference.py"),
            "config": repr(self.cfg),
            "device": device.type,
            "torch": torch.__version__,
        }

    def _config(self) -> Any:
        """The config every shape of the scale shares. One model is built and timed for all
        of them, so shapes whose configs differ (the public board's benchmark builds one per
        shape) cannot be graded together."""
        try:
            configs = [self.reference.build_config(shape) for shape in self.shapes]
        except Exception as err:
            raise TaskError(f"the task's reference.build_config failed: {type(err).__name__}: {err}") from err
        differ = [shape for shape, cfg in zip(self.shapes, configs, strict=True) if repr(cfg) != repr(configs[0])]
        if differ:
            raise TaskError(
                f"the shapes of this scale build different configs ({self.shapes[0]} and {differ[0]}): "
                "kagent grades one model across the shapes of a scale"
            )
        return configs[0]

    def init_state(self, context_len: int, seed: int) -> State:
        return self._inputs("init_state", context_len, seed)

    def init_token(self, seed: int) -> Hidden:
        return self._inputs("init_token", seed)

    def _inputs(self, name: str, *args: Any) -> Any:
        """What the reference's ``name`` draws from ``args``, on the evaluation's device."""
        on_device = self.draws_on_device[name]
        try:
            value = (
                getattr(self.reference, name)(self.cfg, *args, device=self.device)
                if on_device
                else getattr(self.reference, name)(self.cfg, *args)
            )
        except Exception as err:
            where = (
                f"on {self.device}"
                if on_device
                else f"on a device of its choosing (it takes none; this evaluation runs on {self.device})"
            )
            raise TaskError(f"the task's reference.{name} failed {where}: {type(err).__name__}: {err}") from err
        _check_inputs(name, value)
        return to_device(value, self.device)  # no copy for what is on the device already


def clone_state(state: State) -> State:
    return [{k: v.clone() for k, v in layer.items()} for layer in state]


def build_reference(
    task: Task,
    cache: DiskCache,
    found: Callable[[Path], None] = lambda path: None,
    read: Callable[[], None] = lambda: None,
) -> tuple[torch.nn.Module, Path | None]:
    """The reference model with its deterministic weights, built once and cached on disk;
    and the cache's file of those weights (None without a cache). ``found(file)`` is told of
    that file as soon as it is known good (verified, or written), before the model is built
    from it, so that other processes can start loading it meanwhile; ``read()``, once the
    cached weights are on the device, before the model is built from them."""
    key = digest(task.cache_identity["reference"], task.cache_identity["config"])
    path = cache.entry("weights", key)
    if path is not None:
        found(path)
    weights = cache.load("weights", key, task.device, path) if path is not None else None
    if weights is not None:
        read()
        return reference_model(task, weights), path
    if path is None:
        cache.misses += 1
    model = task.reference.Model(task.cfg)  # the reference draws its own deterministic weights
    cache.store("weights", key, model.state_dict())
    path = cache.find(f"weights/{key}.pt")
    if path is not None:
        found(path)
    return model.to(task.device).eval(), path


def reference_model(task: Task, weights: dict) -> torch.nn.Module:
    """The reference model given ``weights`` (a state dict): built without its random init
    where the reference allows (the weights replace it), on the device."""
    Model = task.reference.Model
    if "init_weights" in inspect.signature(Model).parameters:
        with torch.device(task.device):
            model = Model(task.cfg, init_weights=False)
    else:
        model = Model(task.cfg)
    model = model.to(task.device)  # also what a module built on an explicit device left behind
    model.load_state_dict(weights, strict=True)
    return model.eval()


def reference_step(model: Any, hidden: Hidden, state: State) -> tuple[Hidden, State]:
    """The reference's step on copies, so the inputs stay as they were. (``model`` is the task's
    Model: its step is the task's own method, which torch's Module type does not know.)"""
    return model.step(hidden.clone(), clone_state(state))


def reference_case(task: Task, model: torch.nn.Module, hidden: Hidden, state: State) -> tuple:
    """(hidden, state, decision margin) of one reference step."""
    out_hidden, out_state = reference_step(model, hidden, state)
    margin = float(task.decision_margin(model)) if task.decision_margin else None
    return out_hidden, out_state, margin


def case_inputs(task: Task, reference: torch.nn.Module, context_len: int, seed: int, salient: bool) -> list:
    """The (hidden, state) a case starts from: the reference's draws from ``seed``, and for a
    salient case the state its salient_state makes of them for the reference's weights."""
    hidden, state = task.init_token(seed), task.init_state(context_len, seed)
    if salient:
        if task.salient_state is None:
            raise TaskError("a salient case was asked of a task whose reference defines no salient_state")
        try:
            drawn = state
            if task.salient_takes_seed:
                state = task.salient_state(reference, hidden, state, seed=seed)
            else:
                state = task.salient_state(reference, hidden, state)
        except task.near_tie_error:
            raise  # a screened draw stopped at a near-tie (draw_secret_case)
        except Exception as err:
            raise TaskError(f"the task's reference.salient_state failed: {type(err).__name__}: {err}") from err
        _check_inputs("salient_state", state)
        if layout_of(state) != layout_of(drawn):
            raise TaskError("the task's reference.salient_state must keep init_state's shapes and dtypes")
    return [hidden, state]


# A secret case draws seeds until one clears the near-ties; past this many draws for one
# case the task's margin is out of reach.
MAX_DRAWS_PER_CASE = 50
# Where a task names no max_explained_margin: how far past its min_decision_margin a
# mismatch that the runner-up explains is still excused.
EXPLAINED_MARGIN_OVER_MIN_MARGIN = 3.0


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


# A state's layout: per layer, each tensor's shape and dtype.
Layout = list[dict[str, TensorLayout]]


def layout_of(state: State) -> Layout:
    return [{name: TensorLayout.of(t) for name, t in layer.items()} for layer in state]


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
        matched = self._runner_up_match(hidden_in, state_in, hidden, state)
        return matched[0] if matched is not None else result

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
            matched = self._runner_up_match(hidden_in, state_in, hidden, [])
            if matched is not None:
                result, expected_state = matched
        return {**result, "decision_margin": margin}, expected_state

    def _runner_up_match(
        self, hidden_in: Hidden, state_in: State, hidden: Hidden, state: State
    ) -> tuple[dict, State] | None:
        """The comparison with the reference run from the same inputs but with the runner-up
        taken at decisions close enough to a tie that rounding explains a swap, and that
        reference's state: each such decision alone (the closest first), then each two of
        them (two layers on near-ties in one step, which the bf16 baseline swapped both of at
        smoke scale), for the first where the step matches; None where none does, or the task
        has no way to ask.

        Close enough: below the task's max_explained_margin, and where the task says what
        rounding its decision's inputs to bf16 can move (decision_rounding), below that too."""
        task, model = self.task, self.reference
        if task.decision_margins is None or task.runner_up is None:
            return None
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
                return {**result, "excused": excused}, expected_state
        return None


def _named_outputs(hidden: Hidden, state: State) -> dict[str, torch.Tensor]:
    """A step's output tensors by the names StepChecker reports them under."""
    named = {"hidden": hidden}
    for i, layer in enumerate(state):
        named.update({f"L{i}.{name}": tensor for name, tensor in layer.items()})
    return named


def _difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference; infinite where a NaN makes it undefined."""
    difference = compare.max_abs_diff(a, b)
    return math.inf if math.isnan(difference) else difference


def _case_label(seed: str, context_len: int, salient: bool) -> str:
    return f"{seed} ctx {context_len}" + (" salient state" if salient else "")


def _fail_reason(
    label: str, result: dict, threshold: float, margin: float | None = None, explained_margin: float = 0.0
) -> str:
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
    if margin is not None and margin < explained_margin:
        # Said only to rule a tie out: the reference that took the runner-up was tried and does
        # not match either, so rounding at the tie does not explain this (where it does, the case
        # is excused and passes). A hint towards the router here sent a dropped multiply astray.
        reason += (
            f" (the reference's routing is {margin:.2%} from a tie here, but the step does not match the "
            "reference that took the runner-up either: a routing tie does not explain this mismatch)"
        )
    return reason


def _first_to_differ(names: list[str]) -> str | None:
    """Of the outputs below the threshold, the state of the earliest layer (named L<i>.<name>)."""
    layered = [(int(n[1 : n.index(".")]), n) for n in names if re.fullmatch(r"L\d+\..+", n)]
    return min(layered)[1] if layered else None


def _near_tie_note(results: list[dict], min_margin: float) -> str:
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


class MegaEvaluation(EvaluationBase):
    """One evaluation of a solution (or, in A/A mode, of the baseline against itself)."""

    # -- everything trusted happens before the solution's process loads anything ---------------
    def prepare(self) -> None:
        self.task = Task(Path(self.job["task_dir"]), self.job["scale"], self.device)
        task = self.task
        wanted = self.job.get("contexts")
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
                            _case_label(f"seed {seed}", context_len, salient),
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
        kinds = secret_case_kinds(self.task, int(self.job["hidden_seeds"]))
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
                    _case_label(f"hidden seed #{i + 1}", context_len, salient),
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
        solution = Path(self.job["solution"]) if self.job["mode"] != "aa" else None
        return building.mega_spec(who, self.task.dir, solution, self.task.has_baseline)

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
            timed = self.job["mode"] != "check"
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
                if self.job["mode"] != "check"
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
            worst = _fail_reason(case.label, result, task.threshold, case.margin, task.explained_margin)
            return self.send_check(group, "fail", f"{len(failures)} of {len(cases)} cases fail, worst: {worst}", **data)
        worst_cosine = min(r["min_cosine"] for r in results)
        return self.send_check(
            group,
            "pass",
            f"{len(results)} cases, min cosine {worst_cosine:.5f}" + _near_tie_note(results, task.min_margin),
            **data,
        )

    def _report_determinism(self) -> None:
        """The same step twice, on fresh copies of identical inputs in the solution's process:
        whether the outputs are bitwise equal, and how far apart. Information, not a verdict:
        a kernel may reduce in a varying order (atomics, split-K) and still be right, as the
        checks judge; a reader of the result learns whether its answers repeat exactly."""
        case = next(c for c in self.cases if c.label.startswith("hidden"))
        inputs = self.inputs_of(case)
        first, second = [_named_outputs(*self.remote_step("fresh", inputs, 0, case.context_len)) for _ in range(2)]
        differences = {
            name: _difference(second[name], tensor)
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
                    "overwrite_in_place", "fail", _fail_reason(label, result, task.threshold), cases=results
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
                return "fail", _fail_reason(
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
                        return "fail", _fail_reason(
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
