"""Reference workers: processes of the referee's own code that compute expected outputs beside it.

A decode task's secret cases (secret_cases.draw_secret_case: seeds drawn now, each drawn again at a
routing near-tie, about three draws a case at full scale, a reference step each) are most of
a warm evaluation's trusted work, and each is independent of the others. The referee starts
a few workers (reference_worker.py) with the solution's and the baseline's processes, has
each load the reference from the same weights file before any solution code runs, and then
deals the cases out one at a time while the solution's process loads the solution. Each
worker draws its case's seeds itself (secrets, in its own memory), computes the case and
leaves its expected outputs, and a salient case's inputs, in an arena of its own; the referee
copies them out into its own memory before it asks that worker for the next one.

The workers never run a contestant, and the solution's process cannot reach them: they are
non-dumpable, their arenas are shared with them alone (a CUDA IPC handle sent down their own
pipe; on the CPU a file that is unlinked once mapped, before the solution loads), and they
are ended before any timing starts. A worker that dies or fails ends the evaluation: the
solution's process runs as the same user and could have signalled it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import spawn
from .exchange import Arena, SlotAllocator, decode, encode
from .job import Job
from .loading import TaskError
from .remote import Peer, Watch, wait_any
from .secret_cases import SecretCase


class Worker(Peer):
    pipelined = True

    def __init__(self, index: int, device: torch.device, scratch: Path, env: dict[str, str]):
        super().__init__(spawn.worker_argv(str(device)), scratch, env)
        self.label = f"reference worker {index + 1}"
        self.arena: Arena | None = None
        self.slots: SlotAllocator | None = None

    @property
    def attached(self) -> tuple[Arena, SlotAllocator]:
        """Its arena and the allocator of its slots, once shared (ReferenceWorkers.attach)."""
        if self.arena is None or self.slots is None:
            raise self._failure(f"{self.label} was given work before its arena was shared")
        return self.arena, self.slots

    def answer(self, what: str) -> dict:
        """The next reply, checked; a task error in the worker is the task's."""
        reply = self.receive(what)
        if "task_error" in reply:
            raise TaskError(str(reply["task_error"]))
        return self.checked(reply, what)


class Pending:
    """A request dealt to a worker: ``result()`` waits for its answer (read, and what it
    left in the worker's arena taken out, as soon as it arrives, by whoever waits first)."""

    def __init__(self, pool: ReferenceWorkers, worker: Worker, take: Callable[[dict, Worker], Any], what: str):
        self.pool, self.worker, self.take, self.what = pool, worker, take, what
        self.done, self.value = False, None

    def result(self) -> Any:
        while not self.done:
            self.pool._collect(self.worker)
        return self.value

    __call__ = result


class ReferenceWorkers:
    """A pool of reference workers (started at once; ``begin_prepare``/``finish_prepare``
    load the reference in each; ``secret_cases`` and ``judge`` deal work out to whichever
    worker is free next; ``close`` ends them)."""

    def __init__(
        self,
        count: int,
        device: torch.device,
        env: dict[str, str],
        watch: Watch,
        early: dict[str, spawn.Started] | None = None,
    ):
        """``early``: workers started already (spawn.start_early), adopted as "worker N"; the
        others are started now, in a working folder they share."""
        self.device = device
        self.workers = []
        folder: Path | None = None
        for i in range(count):
            started = (early or {}).pop(f"worker {i + 1}", None)
            if started is not None:
                where = started.scratch
            else:
                folder = where = folder or spawn.scratch("worker")
            worker = Worker(i, device, where, env)
            worker.launch(started)
            watch.known.add(worker.pid)
            self.workers.append(worker)
        self.busy: dict[Worker, Pending] = {}
        self.closed = False
        watch.trusted_in_flight = self.in_flight

    def in_flight(self) -> str:
        """The requests dealt out and not yet answered, as words (empty when none)."""
        return "; ".join(f"{worker.label}: {pending.what}" for worker, pending in self.busy.items())

    def begin_prepare(self, job: Job, weights: str) -> None:
        """Have each worker build the task and the reference from ``weights``; answered in
        ``finish_prepare``."""
        for worker in self.workers:
            worker.send({"op": "prepare", "task_dir": job.task, "scale": job.scale, "weights": weights})

    def finish_prepare(self) -> list[dict]:
        """Each worker's answer, in order."""
        return [worker.answer("loading the reference") for worker in self.workers]

    def attach(self, arena_bytes: int, exchange_dir: Path) -> None:
        """Share an arena of ``arena_bytes`` with each worker, its file (on the CPU) unlinked
        once mapped, before any solution code runs."""
        for i, worker in enumerate(self.workers):
            folder = exchange_dir / f"worker-{i + 1}"
            folder.mkdir()
            worker.arena = arena = Arena.create(self.device, arena_bytes, folder)
            worker.slots = SlotAllocator(arena)
            worker.send({"op": "attach", "arena": arena.description})
        for worker in self.workers:
            worker.answer("attaching its arena")
            worker.attached[0].unlink_file()

    # -- dealing work out ------------------------------------------------------------------------
    def submit(self, request: Callable[[Worker], dict], take: Callable[[dict, Worker], Any], what: str) -> Pending:
        """Deal one request to the next free worker (waiting for one where all are busy):
        ``request(worker)`` fills its arena and makes the message, ``take(reply, worker)``
        what the answer comes to, taken out of its arena before it gets more work."""
        worker = next((w for w in self.workers if w not in self.busy), None)
        while worker is None:
            for ready in wait_any(self.busy):
                self._collect(ready)
            worker = next((w for w in self.workers if w not in self.busy), None)
        worker.attached[1].reset()
        message = request(worker)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the arena's new contents first (see ContestantProcess.begin)
        worker.send(message)
        self.busy[worker] = pending = Pending(self, worker, take, what)
        return pending

    def _collect(self, worker: Worker) -> None:
        pending = self.busy.pop(worker)
        pending.value, pending.done = pending.take(worker.answer(pending.what), worker), True

    def secret_cases(self, kinds: list[tuple[int, bool]]) -> list[SecretCase]:
        """One secret case (secret_cases.SecretCase) per (context, salient) of ``kinds``, in order: each
        worker draws its case's seeds itself and leaves the case in its arena."""

        def take(reply: dict, worker: Worker) -> Any:
            hidden, state, inputs = decode(reply["out"], lambda slot: worker.attached[0].view(slot).clone())
            margin = reply.get("margin")
            return SecretCase(
                int(reply["seed"]),
                list(inputs) if inputs is not None else None,
                hidden,
                list(state),
                float(margin) if margin is not None else None,
                int(reply["redrawn"]),
            )

        pending = [
            self.submit(_case_request(context_len, salient), take, "computing a secret case")
            for context_len, salient in kinds
        ]
        return [p.result() for p in pending]

    def judge(self, tensors: list) -> Pending:
        """A chained step judged against the reference from its own input and state
        (secret_cases.judge_chained_step); ``tensors`` are (hidden in, state in, hidden, state)."""

        def request(worker: Worker) -> dict:
            return {"op": "judge", "tensors": encode(tensors, lambda t: _put(worker, t))}

        return self.submit(
            request, lambda reply, worker: (reply["result"], reply.get("margin")), "judging a chained step"
        )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for worker in self.workers:
            worker.close()
            if worker.arena is not None:
                worker.arena.unlink_file()


def _case_request(context_len: int, salient: bool) -> Callable[[Worker], dict]:
    """The request for one secret case, whichever worker it goes to."""
    return lambda _worker: {"op": "case", "context_len": context_len, "salient": salient}


def _put(worker: Worker, tensor: torch.Tensor) -> dict:
    arena, slots = worker.attached
    slot = slots.slot(tuple(tensor.shape), tensor.dtype)
    arena.view(slot).copy_(tensor)
    return slot
