"""Each kind of task as the instruments build it, by the names of kagent.tasks.KINDS (a test
holds the registries to the same names): one step of the solution, built as an evaluation's
solution process builds it; one step of the reference, from a seed; and the bytes floor a
stage's bytes are weighed against."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import torch

from kagent.sandbox.harness import building
from kagent.sandbox.harness.loading import DiskCache, TaskError, load_module, to_device
from kagent.sandbox.instruments.job import ChildJob

# (the model, a no-argument callable running one step of it, the context it uses)
Step = tuple[Any, Callable[[], Any], Optional[int]]


def _cache(job: ChildJob) -> DiskCache:
    """The harness's cache, read-only here: weights built anew are staged in the job's own
    folder and go with it (only evaluations fill the cache)."""
    return DiskCache(Path(job.cache_dir) if job.cache_dir else None, job.staging)


class Mega:
    """A decode step: the step of a model built from the task's config, on a token and a state."""

    def _task(self, job: ChildJob, device: torch.device) -> Any:
        from kagent.sandbox.harness.decode_task import Task

        return Task(Path(job.task), job.scale, device)

    def solution_step(self, job: ChildJob, device: torch.device, module: Optional[ModuleType] = None) -> Step:
        from kagent.sandbox.harness.decode_task import build_reference

        task = self._task(job, device)
        reference, _ = build_reference(task, _cache(job))
        model = building.build(
            building.mega_spec("solution", task.dir, Path(str(job.solution)), task.has_baseline),
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

    def reference_step(self, job: ChildJob, device: torch.device) -> Step:
        """The reference's step from the job's seed (from the task's salient state where the
        job asks); a TaskError where the task has no salient state."""
        from kagent.sandbox.harness.decode_task import build_reference, clone_state

        task = self._task(job, device)
        model: Any  # the task's Model: a torch Module with the task's own step
        model, _ = build_reference(task, _cache(job))
        context_len = job.context_len or task.shapes[0]["context_len"]
        hidden, state = task.init_token(job.seed), task.init_state(context_len, job.seed)
        if job.salient:
            if task.salient_state is None:
                raise TaskError("the task's reference has no salient_state")
            state = task.salient_state(model, hidden, state)
        return model, (lambda: model.step(hidden.clone(), clone_state(state))), context_len

    def bytes_floor(self, job: ChildJob, model: Any, context_len: Optional[int]) -> tuple[dict[str, int], int, str]:
        """The task's parts, its bytes floor and where the floor comes from: its roofline."""
        task = self._task(job, torch.device(job.device))
        roofline = task.roofline
        if roofline is None:
            return {}, 0, "the task has no roofline"
        parts = dict(roofline.bytes_by_part(task.cfg, context_len)) if hasattr(roofline, "bytes_by_part") else {}
        return parts, int(roofline.bytes_per_step(task.cfg, context_len)), "the task's roofline"


class KernelBench:
    """A forward of ModelNew (or of the file's Model) on the file's inputs."""

    def solution_step(self, job: ChildJob, device: torch.device, module: Optional[ModuleType] = None) -> Step:
        task_file = Path(job.task)
        problem = load_module(building.KERNELBENCH_MODULE, task_file)
        init = list(problem.get_init_inputs())
        spec = building.kernelbench_spec("reference", task_file, None)
        reference = building.build(spec, init, device, module=problem)
        model = building.build(
            building.kernelbench_spec("solution", task_file, Path(str(job.solution))),
            init,
            device,
            reference.state_dict(),
            module=module,
        )
        inputs = building.kernelbench_inputs(problem, 0, device)  # the timing seed's inputs
        return model, (lambda: model(*inputs)), None

    def reference_step(self, job: ChildJob, device: torch.device) -> Step:
        problem = load_module("problem", Path(job.task))
        torch.manual_seed(building.KERNELBENCH_SEED)  # as the harness builds models
        model = problem.Model(*problem.get_init_inputs()).to(device).eval()
        torch.manual_seed(job.seed)
        inputs = to_device(list(problem.get_inputs()), device)
        return model, (lambda: model(*inputs)), None

    def bytes_floor(self, job: ChildJob, model: Any, context_len: Optional[int]) -> tuple[dict[str, int], int, str]:
        """No roofline: the floor is the solution's weights, read once a call."""
        weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        return {}, weights, "the solution's weights only"


KINDS: dict[str, Mega | KernelBench] = {"mega": Mega(), "kernelbench": KernelBench()}
