"""A KernelBench-Mega-style task as the harness reads it: its files checked and loaded
(reference.py's build_config, init_state, init_token and Model; problem.yaml's shapes and
correctness settings), the reference built from fixed weights, and the public cases it
answers. The evaluation (mega.py), the secret cases and the step checker all start here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml

from . import building
from .exchange import Layout as TensorLayout
from .kinds import Step
from .loading import DiskCache, TaskError, digest, load_module, to_device

Hidden = torch.Tensor
State = list  # one dict of tensors per layer


# Where a task names no max_explained_margin: how far past its min_decision_margin a
# mismatch that the runner-up explains is still excused.
EXPLAINED_MARGIN_OVER_MIN_MARGIN = 3.0


# A state's layout: per layer, each tensor's shape and dtype.
Layout = list[dict[str, TensorLayout]]


def layout_of(state: State) -> Layout:
    return [{name: TensorLayout.of(t) for name, t in layer.items()} for layer in state]


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


class DecodeSteps:
    """A decode step as the instruments build it (sandbox/instruments; ``job`` is their
    ChildJob): the step of a model built from the task's config, on a token and a state."""

    def _task(self, job: Any, device: torch.device) -> Task:
        return Task(Path(job.task), job.scale, device)

    def solution_step(self, job: Any, device: torch.device, module: ModuleType | None = None) -> Step:
        """The solution's step, built as an evaluation's solution process builds it, on the
        task's timing token and state."""
        task = self._task(job, device)
        reference, _ = build_reference(task, job.cache())
        model = building.build(
            building.mega_spec("solution", task.dir, Path(str(job.solution)), task.has_baseline, job.kind.model_class),
            [task.cfg],
            device,
            reference.state_dict(),
            module=module,
        )
        context_len = job.context_len or task.shapes[0]["context_len"]
        seed = task.timing_seed
        carried = {"hidden": task.init_token(seed), "state": task.init_state(context_len, seed)}

        def step() -> None:
            carried["hidden"], carried["state"] = model.step(carried["hidden"], carried["state"])

        return model, step, context_len

    def reference_step(self, job: Any, device: torch.device) -> Step:
        """The reference's step from the job's seed (from the task's salient state where the
        job asks); a TaskError where the task has no salient state."""
        task = self._task(job, device)
        model: Any  # the task's Model: a torch Module with the task's own step
        model, _ = build_reference(task, job.cache())
        context_len = job.context_len or task.shapes[0]["context_len"]
        hidden, state = task.init_token(job.seed), task.init_state(context_len, job.seed)
        if job.salient:
            if task.salient_state is None:
                raise TaskError("the task's reference has no salient_state")
            state = task.salient_state(model, hidden, state)
        return model, (lambda: model.step(hidden.clone(), clone_state(state))), context_len

    def bytes_floor(self, job: Any, model: Any, context_len: int | None) -> tuple[dict[str, int], int, str]:
        """The task's parts, its bytes floor and where the floor comes from: its roofline."""
        task = self._task(job, torch.device(job.device))
        roofline = task.roofline
        if roofline is None:
            return {}, 0, "the task has no roofline"
        parts = dict(roofline.bytes_by_part(task.cfg, context_len)) if hasattr(roofline, "bytes_by_part") else {}
        return parts, int(roofline.bytes_per_step(task.cfg, context_len)), "the task's roofline"
