"""Where a sweep's members run: local processes, or Ray tasks on one machine or a cluster.

Both run each member with ``drive_member`` (a `kagent run` subprocess and its resumes); they
differ in who picks its GPU and who retries it when its worker dies:

- ``LocalEngine``: threads of the driver, one per slot. A slot is a share of one GPU (each
  GPU has ``per_gpu`` of them; CUDA_VISIBLE_DEVICES names it for the member) or, on a
  CPU-only sweep, of one CPU. Ray is never imported.
- ``RayEngine``: each member is a Ray task asking for ``1/per_gpu`` of a GPU (of a CPU on a
  CPU-only cluster); Ray places it and sets CUDA_VISIBLE_DEVICES. A worker that dies (killed,
  its node lost) is retried by Ray, up to ``retries`` times, and the retry resumes the run from
  its trace. ``auto`` starts a local Ray instance with every local GPU; an address joins a
  cluster. The run folders must be on storage every node mounts at the same path.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Optional, Protocol

from kagent.agent.sweep.member import MemberJob, MemberOutcome, drive_member
from kagent.core.errors import KagentError

# A local Ray instance's object store: members hand back a few kilobytes each.
RAY_OBJECT_STORE_BYTES = 256 << 20


class Engine(Protocol):
    name: str
    capacity: int  # members it runs at once
    device: str  # "cuda" or "cpu": what its slots are shares of

    def start(self, job: MemberJob) -> None:
        """Run the member (its run id names it from now on)."""

    def finished(self, timeout_s: float) -> list[MemberOutcome]:
        """The members that ended within ``timeout_s``, each once."""

    def stop(self) -> None:
        """Stop every member still running (each is cut, and resumable) and let go of the engine."""


def _failed(job: MemberJob, why: str) -> MemberOutcome:
    """A member whose driving raised (a bug of kagent's): recorded as failed, loudly; the others go on."""
    return MemberOutcome(run_id=job.member.run_id, outcome="failed", detail=f"the member's driver failed: {why}")


def local_slots(device: str, per_gpu: int, gpus: Optional[list[int]]) -> list[Optional[str]]:
    """CUDA_VISIBLE_DEVICES of each local slot, the GPUs' shares interleaved so that members
    spread over the GPUs first; on the CPU one share per core (None: nothing to set). GPUs are
    numbered as this process sees them: under a CUDA_VISIBLE_DEVICES of its own, GPU 0 is the
    first that it names."""
    if device == "cpu":
        return [None] * ((os.cpu_count() or 1) * per_gpu)
    if gpus is None:
        import torch

        gpus = list(range(torch.cuda.device_count()))
    if not gpus:
        raise KagentError("a CUDA sweep, but no GPU is here", hint="--device cpu, or --ray ADDRESS for a cluster")
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    if visible and max(gpus) >= len(visible):
        raise KagentError(
            f"--gpus {','.join(map(str, gpus))}: CUDA_VISIBLE_DEVICES={','.join(visible)} shows {len(visible)} GPU(s)"
        )
    return [visible[gpu] if visible else str(gpu) for _ in range(per_gpu) for gpu in gpus]


class LocalEngine:
    name = "local"

    def __init__(self, device: str, per_gpu: int, gpus: Optional[list[int]] = None):
        self.device = device
        self.free = local_slots(device, per_gpu, gpus)
        self.capacity = len(self.free)
        self.pool = ThreadPoolExecutor(self.capacity, thread_name_prefix="member")
        self.running: dict[Future, tuple[MemberJob, Optional[str]]] = {}
        self.stopping = False

    def start(self, job: MemberJob) -> None:
        slot = self.free.pop(0)
        job = job.model_copy(update={"gpu": slot})
        self.running[self.pool.submit(drive_member, job, lambda: self.stopping)] = (job, slot)

    def finished(self, timeout_s: float) -> list[MemberOutcome]:
        if not self.running:
            return []
        done, _ = wait(list(self.running), timeout=timeout_s, return_when=FIRST_COMPLETED)
        outcomes = []
        for future in done:
            job, slot = self.running.pop(future)
            self.free.append(slot)
            error = future.exception()
            outcomes.append(_failed(job, repr(error)) if error else future.result())
        return outcomes

    def stop(self) -> None:
        self.stopping = True  # each member's driver interrupts its run and returns it as cut
        self.pool.shutdown(wait=True)


def _drive_in_ray(job: dict) -> dict:
    """A Ray task: one member, on whatever worker and GPU Ray chose (plain data in and out)."""
    return drive_member(MemberJob.model_validate(job)).model_dump(mode="json")


def import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise KagentError(
            f"--ray needs Ray, which is not installed here ({err})",
            hint="pip install 'kagent[ray]'; without --ray a sweep runs in local processes",
        ) from err
    return ray


class RayEngine:
    name = "ray"

    def __init__(self, address: str, device: Optional[str], per_gpu: int, retries: int):
        self.ray = ray = import_ray()
        try:
            if address == "auto":
                ray.init(
                    address="local",
                    include_dashboard=False,
                    object_store_memory=RAY_OBJECT_STORE_BYTES,
                    log_to_driver=False,
                )
            else:
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ray.exceptions.RayError) as err:
            lines = [line for line in str(err).splitlines() if line.strip()]
            raise KagentError(
                f"cannot {'start Ray' if address == 'auto' else f'join the Ray cluster at {address}'}: "
                f"{lines[-1][:300] if lines else type(err).__name__}",
                hint="a cluster with token authentication needs its token here (RAY_AUTH_TOKEN or "
                "~/.ray/auth_token); `kagent sweep --resume` goes on once it is reachable",
            ) from err
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        self.device = device or ("cuda" if gpus else "cpu")
        if self.device == "cuda" and not gpus:
            ray.shutdown()
            raise KagentError(f"a CUDA sweep, but the Ray cluster at {address} has no GPU")
        share = 1.0 / per_gpu
        # A GPU member asks for its share of a GPU and no CPU: the GPUs are what there are few of.
        demand = {"num_gpus": share, "num_cpus": 0} if self.device == "cuda" else {"num_cpus": share}
        self.capacity = (gpus if self.device == "cuda" else cpus) * per_gpu
        # Retried by Ray when its worker dies (a system failure); an exception is no reason to.
        self.task = ray.remote(_drive_in_ray).options(max_retries=retries, retry_exceptions=False, **demand)
        self.running: dict[Any, MemberJob] = {}

    def start(self, job: MemberJob) -> None:
        self.running[self.task.remote(job.model_dump(mode="json"))] = job

    def finished(self, timeout_s: float) -> list[MemberOutcome]:
        if not self.running:
            return []
        done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=timeout_s)
        outcomes = []
        for ref in done:
            job = self.running.pop(ref)
            try:
                outcomes.append(MemberOutcome.model_validate(self.ray.get(ref)))
            except self.ray.exceptions.RayError as err:  # its retries spent, or its driver raised
                said = str(err).strip()
                outcomes.append(_failed(job, said.splitlines()[-1][:500] if said else repr(err)))
        return outcomes

    def stop(self) -> None:
        # The members die with their workers (a parent-death signal) and are resumed later.
        self.ray.shutdown()
