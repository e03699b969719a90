"""Entry point of the evaluation child: ``python -m kagent_harness --job JOB --result-fd FD``."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

# Nothing here imports torch before the evaluation's other processes are started (spawn.py).
from . import lease, spawn
from .job import Job
from .protocol import EXIT_BAD_JOB, EXIT_OK, PROTOCOL_VERSION, Channel, read_key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kagent_harness", description=__doc__)
    parser.add_argument("--job", required=True, help="the job file (JSON) written by the agent side")
    parser.add_argument("--result-fd", type=int, default=None, help="file descriptor for the result events")
    parser.add_argument(
        "--key-fd",
        type=int,
        default=None,
        help="file descriptor to read the events' signing key from (read and closed at once)",
    )
    args = parser.parse_args(argv)
    try:  # first of all: no candidate code has run yet
        key = read_key(args.key_fd) if args.key_fd is not None else None
    except (OSError, ValueError) as err:
        print(f"kagent_harness: cannot read the signing key: {err}", file=sys.stderr)
        return EXIT_BAD_JOB
    try:
        job = Job.read(args.job)
    except (OSError, ValueError) as err:
        print(f"kagent_harness: cannot read the job file: {err}", file=sys.stderr)
        return EXIT_BAD_JOB
    channel = Channel(args.result_fd, key)
    try:
        early = spawn.start_early(job)  # their interpreters and torch start while this one's do
    except OSError:
        early = {}  # the evaluation starts them itself, and reports why it cannot
    try:
        with lease.shared(job, channel):  # the device's lease: shared from the first device work, alone to time
            run(job, channel, early)
    finally:
        spawn.close_unadopted(early)
    return EXIT_OK


def run(job: Job, channel: Channel, early: dict[str, spawn.Started] | None = None) -> None:
    """Evaluate the job, reporting every step on ``channel``; always ends with ``done``.
    ``early``: the evaluation's processes, started already (spawn.start_early)."""
    started = time.perf_counter()
    channel.send("started", pid=os.getpid(), protocol=PROTOCOL_VERSION, kind=job.kind.name, mode=job.mode)
    from .loading import CandidateError, TaskError
    from .remote import TrustedFailed

    evaluation = None
    try:
        evaluation = job.kind.evaluation_class()(job, channel, early, began=started)
        evaluation.run()
    except TaskError as err:
        channel.send("task_error", reason=str(err))
    except CandidateError as err:  # raised outside a check, e.g. while the task is prepared
        channel.send("check", name="harness", status="error", reason=err.message, details=err.details)
    except TrustedFailed as err:  # a process of the referee's own died or failed: no figure stands
        channel.send("check", name="harness", status="crash", reason=err.message, details=err.details)
    except Exception as err:  # a bug in the harness or the task: reported whole, loudly
        channel.send("internal_error", reason=f"{type(err).__name__}: {err}", details=traceback.format_exc()[-6000:])
    finally:
        if evaluation is not None:
            evaluation.close_solution()
    cache = getattr(evaluation, "cache", None)
    channel.send(
        "done",
        wall_seconds=round(time.perf_counter() - started, 3),
        phases=getattr(evaluation, "phase_seconds", {}),
        start_up=getattr(evaluation, "start_up", {}),
        hidden_seeds=getattr(evaluation, "hidden_seeds", []),
        cache={"hits": cache.hits, "misses": cache.misses} if cache else {},
    )


if __name__ == "__main__":
    sys.exit(main())
