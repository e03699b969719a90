"""A reference worker's process: the referee's own code, drawing secret cases and judging chained steps.

Started by the referee (workers.py) as ``python -I -B -u reference_worker.py --requests-fd R
--replies-fd W --device D`` from an empty working directory, it makes itself non-dumpable
before it reads any request, then builds the task and the reference from the weights file it
is given, and answers one JSON request per line (``WorkerSession``) with the same loop as a
contestant's process (solution_server.main). It never imports a solution or a baseline.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

# -I leaves the script's own folder off sys.path: the harness package is found by path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class WorkerSession:
    """The task, the reference and the arena between requests."""

    def __init__(self, device: Any):
        self.device = device
        # Set by op_attach and op_prepare; their types are the harness's, imported there.
        self.arena: Any = None
        self.slots: Any = None
        self.task: Any = None
        self.reference: Any = None

    def handle(self, request: dict) -> dict:
        import torch

        from kagent_harness.loading import TaskError

        handler = getattr(self, f"op_{request.get('op')}", None)
        if handler is None:
            return {"protocol": f"unknown request {request.get('op')!r}"}
        try:
            reply = handler(request) or {}
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the referee reads the arena next
        except TaskError as err:
            return {"task_error": str(err)}
        except Exception as err:  # a bug here is the harness's: said whole
            return {"raised": f"{type(err).__name__}: {err}", "details": traceback.format_exc()[-4000:]}
        return {"ok": True, **reply}

    def op_attach(self, request: dict) -> None:
        from kagent_harness.exchange import Arena, SlotAllocator

        self.arena = Arena.attach(request["arena"])
        self.slots = SlotAllocator(self.arena)

    def op_prepare(self, request: dict) -> None:
        import torch

        from kagent_harness.decode_task import Task, reference_model

        self.task = Task(Path(request["task_dir"]), request["scale"], self.device)
        weights = torch.load(request["weights"], map_location=self.device, weights_only=True, mmap=True)
        self.reference = reference_model(self.task, weights)

    def op_case(self, request: dict) -> dict:
        """A secret case (secret_cases.draw_secret_case): its seed, margin and draws in the reply, its
        expected outputs (and a salient case's inputs) in the arena."""
        from kagent_harness.exchange import encode
        from kagent_harness.secret_cases import draw_secret_case

        case = draw_secret_case(self.task, self.reference, int(request["context_len"]), bool(request["salient"]))
        self.slots.reset()  # the referee took the last case out before it asked for this one

        def put(tensor: Any) -> dict:
            slot = self.slots.slot(tuple(tensor.shape), tensor.dtype)
            self.arena.view(slot).copy_(tensor)
            return slot

        return {
            "seed": case.seed,
            "margin": case.margin,
            "redrawn": case.redrawn,
            "out": encode([case.expected_hidden, case.expected_state, case.inputs], put),
        }

    def op_judge(self, request: dict) -> dict:
        """A chained step judged against the reference (secret_cases.judge_chained_step), from the
        tensors the referee put in the arena."""
        from kagent_harness.exchange import decode
        from kagent_harness.secret_cases import judge_chained_step
        from kagent_harness.step_checker import StepChecker

        hidden_in, state_in, hidden, state = decode(request["tensors"], self.arena.view)
        checker = StepChecker(self.task, self.reference)
        result, margin = judge_chained_step(
            self.task, self.reference, checker, hidden_in, list(state_in), hidden, list(state)
        )
        return {"result": result, "margin": margin}


if __name__ == "__main__":
    from kagent_harness.solution_server import main

    main(WorkerSession, prog="reference_worker", description=__doc__, non_dumpable=True)
