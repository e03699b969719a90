"""What a sweep is: its settings and its members (tasks × models × branches)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from kagent.core.errors import KagentError
from kagent.tasks import looks_like_task, resolve_task

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class SweepSpec(BaseModel):
    """Everything that defines a sweep; the first entry of its record holds it."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    sweep_id: str
    tasks: list[str] = Field(description="Built-in names and absolute paths, as each member's `kagent run` gets them")
    models: list[str] = Field(description="Model specs (provider:model)")
    branches: int = Field(1, ge=1, description="Runs of each task and model, from the same baseline")
    directions: list[str] = Field(default_factory=list, description="What branch 1, 2, ... is told to try")
    budget_s: float = Field(gt=0, description="Each member's wall-clock budget")
    total_budget_s: Optional[float] = Field(
        None,
        gt=0,
        description="The sweep's wall-clock budget: no member "
        "starts with less than MIN_MEMBER_S of it left, none runs past it",
    )
    max_cost_usd: Optional[float] = Field(
        None, gt=0, description="The whole sweep's cost cap, shared out among the members as they start"
    )
    max_tokens: Optional[int] = Field(None, gt=0, description="Each member's token cap")
    device: Literal["cpu", "cuda"]
    scale: Optional[Literal["smoke", "full"]] = Field(None, description="None: kagent run's default for the device")
    per_gpu: int = Field(1, ge=1, description="Members that share one GPU (on a CPU-only sweep: one CPU)")
    gpus: Optional[list[int]] = Field(None, description="The local engine's GPUs (default: every one)")
    engine: Literal["local", "ray"] = "local"
    ray_address: Optional[str] = Field(None, description="auto: a local Ray instance; else a cluster's address")
    retries: int = Field(
        2, ge=0, description="How often a member cut by a dead worker is resumed before it counts as failed"
    )
    grace_s: float = Field(
        120.0, gt=0, description="How long past its budget a member may run before it is ended as hung"
    )
    run_config: Optional[str] = Field(None, description="A `kagent run --config` file every member gets")


class Member(BaseModel):
    """One run of the sweep: a task, a model and a branch, with the run id the sweep gave it."""

    model_config = ConfigDict(extra="forbid")
    index: int
    run_id: str
    task: str
    task_name: str
    model: str
    branch: int
    direction: Optional[str] = None

    @property
    def label(self) -> str:
        return f"{self.task_name} · {self.model} · b{self.branch}"


def new_sweep_id(name: Optional[str] = None) -> str:
    stamp = f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    return f"{_UNSAFE.sub('_', name)}-{stamp}" if name else f"sweep-{stamp}"


def expand_tasks(arguments: list[str]) -> list[str]:
    """Each task argument as a member's `kagent run` takes it: a built-in name as it is, a
    problem folder or KernelBench file as an absolute path, and a folder of them as each of
    its problem folders and .py files (names starting with '_' or '.' left out), in order."""
    tasks: list[str] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir() and not looks_like_task(path):
            found = sorted(p for p in path.iterdir() if not p.name.startswith(("_", ".")) and looks_like_task(p))
            if not found:
                raise KagentError(f"{path} holds no task: no problem folder and no KernelBench .py file")
            tasks += [str(p.resolve()) for p in found]
        else:
            tasks.append(str(path.resolve()) if path.exists() else argument)
    for task in tasks:
        resolve_task(task)  # each one clear error, before anything starts
    if len(set(tasks)) < len(tasks):
        raise KagentError("a task is named twice", hint="--branches runs a task several times")
    return tasks


def default_direction(branch: int, branches: int) -> str:
    """What a branch without a stated direction is told: its number, as a seed of its own."""
    return (
        f"you are branch {branch} of {branches} of a sweep (seed {branch}): the other branches work on the same "
        f"task from the same baseline, each on its own. Choose your own line of attack; prefer one the others "
        f"are less likely to take."
    )


def plan_members(spec: SweepSpec) -> list[Member]:
    """tasks × models × branches, task by task; each member's run id starts with its task."""
    suffix = "-".join(spec.sweep_id.split("-")[-3:])  # the sweep's time and random part
    members: list[Member] = []
    for task in spec.tasks:
        task_name = resolve_task(task).name
        for model in spec.models:
            for branch in range(1, spec.branches + 1):
                index = len(members) + 1
                direction = (
                    spec.directions[branch - 1]
                    if branch <= len(spec.directions)
                    else default_direction(branch, spec.branches)
                    if spec.branches > 1
                    else None
                )
                members.append(
                    Member(
                        index=index,
                        run_id=f"{_UNSAFE.sub('_', task_name)}-{suffix}-m{index:02d}",
                        task=task,
                        task_name=task_name,
                        model=model,
                        branch=branch,
                        direction=direction,
                    )
                )
    return members
