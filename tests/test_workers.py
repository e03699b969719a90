"""The reference workers' pool deals queued requests out in order, to whichever worker is free,
whenever the referee waits for an answer or pumps between its own requests: the workers keep
drawing secret cases while the solution's process runs the first checks."""
from __future__ import annotations

import sys
import time

import torch

from kagent.sandbox.harness.exchange import Arena, SlotAllocator
from kagent.sandbox.harness.remote import Watch
from kagent.sandbox.harness.workers import ReferenceWorkers, Worker

# A worker that answers each request after the time it asks for, with the number it carries.
SLOW_ECHO = """
import argparse, json, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--requests-fd", type=int)
parser.add_argument("--replies-fd", type=int)
args = parser.parse_args()
with os.fdopen(args.requests_fd) as requests, os.fdopen(args.replies_fd, "w") as replies:
    for line in requests:
        message = json.loads(line)
        time.sleep(message["sleep"])
        replies.write(json.dumps({"ok": True, "n": message["n"]}) + "\\n")
        replies.flush()
"""
ANSWER_S = 0.2


def _pool(tmp_path, workers: int) -> ReferenceWorkers:
    cpu = torch.device("cpu")
    server = tmp_path / "slow_echo.py"
    server.write_text(SLOW_ECHO)
    pool = ReferenceWorkers(0, cpu, {}, Watch(cpu, False))
    for i in range(workers):
        worker = Worker(i, cpu, tmp_path, {})
        worker.argv = [sys.executable, "-I", "-B", "-u", str(server)]
        worker.launch()
        folder = tmp_path / f"worker-{i + 1}"
        folder.mkdir()
        worker.arena = Arena.create(cpu, 1 << 12, folder)
        worker.slots = SlotAllocator(worker.arena)
        pool.workers.append(worker)
    return pool


def _asking(pool: ReferenceWorkers, n: int, submit: bool = False):
    deal = pool.submit if submit else pool.queue_up
    return deal(lambda worker: {"n": n, "sleep": ANSWER_S}, lambda reply, worker: reply["n"], f"answering {n}")


def test_queued_requests_are_dealt_out_in_order_while_the_referee_pumps_between_its_own_work(tmp_path):
    pool = _pool(tmp_path, 2)
    try:
        started = time.monotonic()
        queued = [_asking(pool, n) for n in range(6)]
        assert time.monotonic() - started < ANSWER_S  # queuing waits for nothing
        assert [p.worker is not None for p in queued] == [True, True, False, False, False, False]
        time.sleep(2.5 * ANSWER_S)  # both answered, and nobody read them: nothing more was dealt out
        assert sum(p.worker is not None for p in queued) == 2 and not any(p.done for p in queued)
        deadline = time.monotonic() + 30 * ANSWER_S
        while not all(p.done for p in queued):  # the referee at its own work, pumping in between
            assert time.monotonic() < deadline, [p.done for p in queued]
            pool.pump()
            time.sleep(0.01)
        assert [p.result() for p in queued] == list(range(6))

        # A request submitted now goes out behind those queued before it, and before it returns.
        queued = [_asking(pool, n) for n in range(10, 14)]
        judged = _asking(pool, 99, submit=True)
        assert judged.worker is not None and all(p.worker is not None for p in queued)
        assert sum(p.done for p in queued) >= 2  # two workers: at least two answers came first
        assert judged.result() == 99 and [p.result() for p in queued] == [10, 11, 12, 13]
        assert not pool.busy and not pool.queue
    finally:
        for worker in pool.workers:
            worker.close()
