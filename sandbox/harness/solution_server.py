"""A contestant's own process: imports one contestant and runs what the referee asks, nothing else.

Every contestant of a timed run is served by this same code, each in a process of its own:
the solution's process, and the baseline's (which loads the task's baseline and never any
solution code; in an A/A run the baseline stands in for the solution too). So both pay the
same cost for every request the referee times (pipes, waking a stopped process, the device's
switch into its context, caches cold after the other ran), and an A/A run is exact by
symmetry.

Started by the referee (remote.py) as ``python -P -s -B -u solution_server.py --requests-fd R
--replies-fd W --device D --non-dumpable 0|1`` from an empty working directory, with no
PYTHON* variable but a fixed hash seed and no address randomization (``spawn.alike_python``):
a fresh interpreter that heeds no user site-packages and not the working directory, so no
file beside the solution can shadow a module before the solution itself is imported, and
then only here. The solution's process holds no reference, no expected value, no key and no
clock that a verdict depends on: whatever the solution does to it changes only what the
referee reads back from the shared arena, and that is judged there. The baseline's process
makes itself non-dumpable first of all (``--non-dumpable 1``), so that the solution's process,
which has no capabilities, can neither read nor trace it.

One JSON request per line on R, one JSON reply per line on W (see ``Session``). Standard
library and torch only.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# -I leaves the script's own folder off sys.path: the harness package is found by path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from kagent_harness import building, launches  # noqa: E402
from kagent_harness.exchange import Arena, BadReturn, ExchangeError, copy_tree, decode, fill  # noqa: E402
from kagent_harness.protocol import make_non_dumpable  # noqa: E402

DETAILS_CHARS = 4000


class SolutionRaised(Exception):
    """The solution's code raised; the message says where, ``details`` holds the traceback."""

    def __init__(self, message: str, details: str):
        super().__init__(message)
        self.details = details


def solution_call(what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (Exception, SystemExit) as exc:  # sys.exit() in solution code is its failure too
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-DETAILS_CHARS:]
        raise SolutionRaised(f"{what} raised {type(exc).__name__}: {str(exc)[:500]}", details) from exc


class Session:
    """The state between requests: the arena, the model, and what a chain goes on from."""

    def __init__(self, device: torch.device):
        self.device = device
        self.attached: Arena | None = None  # op_attach
        self.model: Any = None
        self.args: list | None = None  # the arguments of the last call, kept for a second call
        self.containers: list = []  # (container, its original items) inside self.args
        self.chain: Any = None  # the (hidden, state) the next chained step starts from
        self.staged: list = []  # fresh copies of inputs for the next timed request (op_stage)
        # Each staged set's last output of the last timed calls on sets, and which set the
        # very last call took (op_repeat with sets, op_collect).
        self.collected: tuple[list, int | None] = ([], None)
        # Every single call's inputs and outputs stay alive, as they would in one process
        # holding all its cases: each case has addresses of its own, so an answer cached by
        # pointer can only go stale where the referee means it to (the second call).
        self.kept: list = []
        self.cell = torch.zeros(1, device=device) if device.type == "cuda" else None

    @property
    def arena(self) -> Arena:
        """The arena shared with the referee, once attached."""
        if self.attached is None:
            raise ExchangeError("a request that needs the arena came before the arena was attached")
        return self.attached

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        if handler is None:
            raise ExchangeError(f"unknown request {op!r}")
        reply = handler(request) or {}
        if self.device.type == "cuda":
            # Errors of asynchronous work surface in the request that caused them.
            solution_call("the device work", torch.cuda.synchronize, self.device)
        return {"ok": True, **reply}

    # -- requests ----------------------------------------------------------------------------
    def op_attach(self, request: dict) -> None:
        self.attached = Arena.attach(request["arena"])

    def op_noop(self, request: dict) -> dict:
        """Nothing but a one-element kernel, timed as a chain's steps are (scripts that study
        the exchange's overhead use it)."""
        events = self._events()
        if self.cell is not None:
            self.cell.add_(1.0)
        return {"device_ms": events()}

    def op_load(self, request: dict) -> None:
        """Import and build the contestant (building.build), then freeze the heap."""
        init = decode(request["init"], self._fresh)
        try:
            self.model = building.build(
                building.Spec.of(request), init, self.device, request.get("weights"), guard=solution_call
            )
        except LookupError as err:  # the class it was to build is missing
            raise SolutionRaised(str(err), "") from err
        gc.collect()  # as the referee does before it times anything (timing.freeze_heap)
        gc.freeze()

    def op_call(self, request: dict) -> dict:
        """One call of a method: on fresh copies of the arena's inputs, on the previous call's
        very objects overwritten in place (``reuse``), or on the chain's last output."""
        source = request["source"]
        if source == "fresh":
            args = self._materialize(request["args"])
        elif source == "reuse":
            args = self._overwrite(request["args"])
        elif source == "chain":
            args = list(self.chain)
        else:
            raise ExchangeError(f"unknown argument source {source!r}")
        returned = solution_call(request["what"], getattr(self.model, request["method"]), *args)
        if source != "chain":
            self.kept.append((args, returned))
        if request.get("check_inputs"):
            changed = self._changed_inputs(request["args"], args)
            if changed:
                return {"changed_inputs": changed}
        try:
            fill(request["out"], returned, self.arena, request["returns"])
        except BadReturn as err:
            return {"bad_return": str(err)}
        if request.get("keep"):
            self.chain = returned
        return {}

    def op_stage(self, request: dict) -> None:
        """Fresh copies of a timed request's inputs, made in a request of their own so that
        the timed one spends nothing on them: one of each of ``begins``, one for each chain
        the next timed request starts (none: it goes on from where the chain is)."""
        self.staged = [list(decode(begin, self._fresh)) for begin in request["begins"]]

    def op_chain(self, request: dict) -> dict:
        """``steps`` chained steps, each output fed back in, each step's hidden recorded into
        the arena; ``chains`` times over, each from a staged copy of its inputs when
        ``fresh`` (recorded one chain after another), else going on from the last step. The
        referee times this whole request with its own clock; the events here are this
        process's own view, reported for information only."""
        record = self.arena.view(request["record"])
        first = int(request["record_from"])
        steps, chains, fresh = int(request["steps"]), int(request.get("chains", 1)), bool(request.get("fresh"))
        if fresh and len(self.staged) < chains:
            raise ExchangeError(f"{chains} fresh chains asked for, {len(self.staged)} staged")
        events = self._events()
        for run in range(chains):
            if fresh:
                self.chain = self.staged.pop(0)
            for i in range(steps):  # none when the referee times an empty request: nothing of the model is touched
                returned = solution_call("step", self.model.step, *self.chain)
                if (
                    not isinstance(returned, (tuple, list))
                    or len(returned) != 2
                    or type(returned[0]) is not torch.Tensor
                ):
                    return {
                        "bad_return": f"step {i + 1} of a chain must return (hidden tensor, state), got "
                        f"{type(returned).__name__}"
                    }
                record[first + run * steps + i].copy_(returned[0])
                self.chain = returned
        return {"device_ms": events()}

    def op_repeat(self, request: dict) -> dict:
        """``steps`` calls of the method on the same inputs (KernelBench's timed calls), from
        the staged copy where there is one; the last output is copied to the arena. With
        ``sets``, the calls take the staged input sets in turn instead, and each set's last
        output is kept for ``collect`` (untimed)."""
        if request.get("sets"):
            return self._repeat_on_sets(request)
        if self.staged:
            self.args = self.staged.pop(0)
        args = self.args
        if args is None:
            raise ExchangeError("a repeated call was asked for before a first one")
        steps = int(request["steps"])
        events = self._events()
        returned = None
        for _ in range(steps):  # none when the referee times an empty request: nothing of the model is touched
            returned = solution_call(request["what"], getattr(self.model, request["method"]), *args)
        reported = events()
        if not steps:
            return {"device_ms": reported}
        try:
            fill(request["out"], returned, self.arena, request["returns"])
        except BadReturn as err:
            return {"bad_return": str(err)}
        return {"device_ms": reported}

    def _repeat_on_sets(self, request: dict) -> dict:
        sets = self.staged
        if not sets:
            raise ExchangeError("timed calls on staged input sets asked for, none staged")
        steps = int(request["steps"])
        outputs: list = [None] * len(sets)
        events = self._events()
        for i in range(steps):  # none when the referee times an empty request, before any model is built
            outputs[i % len(sets)] = solution_call(
                request["what"], getattr(self.model, request["method"]), *sets[i % len(sets)]
            )
        reported = events()
        self.collected = (outputs, (steps - 1) % len(sets) if steps else None)
        return {"device_ms": reported}

    def op_collect(self, request: dict) -> dict:
        """The outputs the last timed calls on staged sets kept, into the arena: those of
        every set, or where they share memory (one buffer returned every call) the last
        call's alone, the only one still as it was returned; ``kept`` says which."""
        outputs, last = self.collected
        self.collected = ([], None)
        kept = [i for i, out in enumerate(outputs) if out is not None]
        storages = [{t.untyped_storage().data_ptr() for t in _tensors_of(outputs[i])} for i in kept]
        if any(a & b for n, a in enumerate(storages) for b in storages[n + 1 :]):
            kept = [last] if last is not None else []
        try:
            for i in kept:
                fill(request["outs"][i], outputs[i], self.arena, request["returns"])
        except BadReturn as err:
            return {"bad_return": str(err)}
        return {"kept": kept}

    def op_launches(self, request: dict) -> dict:
        """Kernel launches of one call on fresh inputs, as this process's profiler sees them."""
        args = self._materialize(request["args"])
        method = getattr(self.model, request["method"])
        solution_call(request["what"], method, *args)  # warm
        try:
            return {"report": launches.count_launches(self.device, lambda: method(*args))}
        except Exception as exc:  # a profiler failure is the solution's or the device's; said, not fatal
            return {"report": {"launches": None, "note": f"profiling failed: {type(exc).__name__}: {exc}"}}

    # -- arguments ---------------------------------------------------------------------------
    def _fresh(self, slot: dict) -> torch.Tensor:
        return self.arena.view(slot).clone()

    def _materialize(self, node: dict) -> list:
        args = list(decode(node, self._fresh))
        self.args = args
        self.containers = []
        pending: list = [args]
        while pending:  # remember every container's items, to put them back for a second call
            container = pending.pop()
            items = list(container.items()) if isinstance(container, dict) else list(container)
            self.containers.append((container, items))
            pending += [
                v
                for v in (dict(items).values() if isinstance(container, dict) else items)
                if isinstance(v, (list, dict))
            ]
        return args

    def _overwrite(self, node: dict) -> list:
        """The previous call's very argument objects: every container holds its original items
        again, and every tensor is overwritten in place with the arena's new values."""
        if self.args is None:
            raise ExchangeError("a second call was asked for before a first one")
        for container, items in self.containers:
            if isinstance(container, dict):
                container.clear()
                container.update(items)
            else:
                container[:] = items
        fresh = decode(node, lambda slot: self.arena.view(slot))
        copy_tree(self.args, fresh)
        return self.args

    def _changed_inputs(self, node: dict, args: list) -> list[int]:
        """The positions, among the tensors of ``args``, of those a call left other than the
        arena holds them: the call wrote into its inputs."""
        given = _tensors_of(decode(node, self.arena.view))
        return [
            i
            for i, (mine, theirs) in enumerate(zip(_tensors_of(args), given, strict=False))
            if mine.shape != theirs.shape
            or mine.dtype != theirs.dtype
            or not torch.equal(
                mine.contiguous().reshape(-1).view(torch.uint8), theirs.contiguous().reshape(-1).view(torch.uint8)
            )
        ]

    def _events(self):
        """Starts the solution process's own timer; the returned function stops it."""
        if self.device.type != "cuda":
            return lambda: None
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()

        def stop() -> float:
            end.record()
            end.synchronize()
            return float(begin.elapsed_time(end))

        return stop


def _tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors of an argument tree, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_of(v)]
    return []


# Requests whose replies say when this process was ready and when the request came, on the
# machine's monotonic clock, which every process reads alike: where an evaluation's start-up
# went, process by process (base.EvaluationBase.note_start_up).
_START_UP_OPS = ("load", "prepare")


def serve(requests: Any, replies: Any, session: Any) -> None:
    ready_at = time.monotonic()  # the interpreter, torch and the device's context are up
    for line in requests:
        received = time.perf_counter_ns()
        received_at = time.monotonic()
        try:
            request = json.loads(line)
            if request.get("op") == "exit":
                return
            reply = session.handle(request)
            # This process's own view of how long it worked on the request: information for
            # whoever studies the exchange's overhead, never a figure of the evaluation.
            reply["handled_ms"] = (time.perf_counter_ns() - received) / 1e6
            if request.get("op") in _START_UP_OPS:
                reply.update(ready_at=ready_at, received_at=received_at)
        except SolutionRaised as err:
            reply = {"raised": str(err), "details": err.details}
        except (ExchangeError, KeyError, TypeError, ValueError) as err:
            reply = {"protocol": f"{type(err).__name__}: {err}", "details": traceback.format_exc()[-DETAILS_CHARS:]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main(
    make_session: Any = None, prog: str = "solution_server", description: str = __doc__, non_dumpable: bool = False
) -> None:
    """Serve requests on the descriptors the command line names: a contestant's session by
    default; ``make_session(device)`` another (a reference worker's, always ``non_dumpable``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--requests-fd", type=int, required=True)
    parser.add_argument("--replies-fd", type=int, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument(
        "--non-dumpable",
        type=int,
        choices=(0, 1),
        default=0,
        help="1: make this process non-dumpable first of all (the baseline's: no other process may read it)",
    )
    args = parser.parse_args()
    if args.non_dumpable or non_dumpable:
        make_non_dumpable()
    torch.set_grad_enabled(False)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with os.fdopen(args.requests_fd, "r") as requests, os.fdopen(args.replies_fd, "w") as replies:
        serve(requests, replies, (make_session or Session)(device))


if __name__ == "__main__":
    main()
