"""How much does a host-bound step's time depend on the process that runs it? (issues 9, 10)

An A/A evaluation on the H200 (the baseline against itself, each in a process of its own)
read 1.032-1.035 at all three contexts of one run and 0.98-1.01 in others (2026-12-03,
the lab notebook (lab/notebook/)): a bias that holds for a whole process. This script starts several fresh
processes that each build the flagship's baseline, times them in turn on one CPU (as the
harness times its contestants: each process sleeps in a read while another runs), and
prints each process's median ms per step and the spread between processes. It does so for
each way of starting the interpreter asked for:

- ``isolated``: ``python -I`` as the harness started its contestants until 2026-12-03 (a random hash seed and a
  random address layout per process);
- ``hash_seed``: the same with one fixed hash seed for every process (``-s -P`` and a
  scrubbed environment with ``PYTHONHASHSEED``: ``-I`` would ignore it);
- ``no_aslr``: ``python -I`` with the address layout fixed (``personality(ADDR_NO_RANDOMIZE)``
  before the interpreter starts);
- ``both``: both fixed.

If one of them removes the spread, that is the cause. It writes one JSON line per process
and a summary per way, and the whole record to ``--out``.

    python3 lab/scripts/process_spread.py --device cuda --processes 6 --rounds 30 --out spread.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "02_kimi_linear_decode"
ADDR_NO_RANDOMIZE = 0x0040000
WAYS = ("isolated", "hash_seed", "no_aslr", "both")


class _Child:
    """The flagship's baseline at one scale and context, random weights, and its chain."""

    def __init__(self, task_dir: Path, device_name: str, context_len: int, scale: str):
        import torch

        sys.path.insert(0, str(task_dir))
        import baseline
        import reference
        import shapes

        self.torch, self.reference = torch, reference
        self.device = device = torch.device(device_name)
        self.shapes = shapes.SHAPES if scale == "full" else shapes.SMOKE_SHAPES
        shape = next(s for s in self.shapes if s["context_len"] == context_len)
        self.cfg = cfg = reference.build_config(shape)
        with torch.device(device), torch.no_grad():
            self.model = baseline.Model(cfg).to(device).eval()
            for tensor in [*self.model.parameters(), *self.model.buffers()]:
                if tensor.dtype == torch.uint8:
                    tensor.random_(0, 256)
                elif tensor.is_floating_point():
                    tensor.normal_(0.0, 0.02)
        self.chain = [
            reference.init_token(cfg, 0, device=device),
            reference.init_state(cfg, context_len, 0, device=device),
        ]

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def steps(self, count: int) -> float:
        """``count`` steps of the chain; milliseconds per step by the host's clock."""
        started = time.perf_counter_ns()
        with self.torch.no_grad():
            for _ in range(count):
                self.chain[:] = self.model.step(*self.chain)
        self.synchronize()
        return (time.perf_counter_ns() - started) / 1e6 / count

    def device_ms(self, count: int) -> float:
        """The device's busy time per step over ``count`` steps, from the profiler (its
        kernels' durations summed), beside the host's clock."""
        torch = self.torch
        use_device = None if self.device.type == "cpu" else self.device.type
        with torch.autograd.profiler.profile(use_device=use_device, use_kineto=True) as prof:
            self.steps(count)
        busy_us = sum(
            e.time_range.elapsed_us() for e in prof.function_events if e.device_type == torch.autograd.DeviceType.CUDA
        )
        return busy_us / 1e3 / count

    def history(self, count: int) -> float:
        """Fresh single steps at each of the scale's contexts in turn, as an evaluation's
        checks run in the solution's process before its timing (and not in the baseline's);
        the chain that is timed is left as it was. Answers 0.0."""
        contexts = [s["context_len"] for s in self.shapes]
        with self.torch.no_grad():
            for i in range(count):
                self.model.step(
                    self.reference.init_token(self.cfg, 100 + i, device=self.device),
                    self.reference.init_state(self.cfg, contexts[i % len(contexts)], 100 + i, device=self.device),
                )
        self.synchronize()
        return 0.0


def child(task_dir: Path, device_name: str, context_len: int, scale: str) -> None:
    """One process: the baseline (``_Child``), then for every line read on stdin, "N": N steps
    timed by the host's clock; "device N": by the profiler; "history N": N untimed steps of
    other states first; each line's milliseconds (per step) written back."""
    process = _Child(task_dir, device_name, context_len, scale)
    process.steps(3)
    print("ready", flush=True)
    answers = {"device": process.device_ms, "history": process.history}
    for line in sys.stdin:
        words = line.split()
        answer = answers[words[0]] if len(words) == 2 else process.steps
        print(answer(int(words[-1])), flush=True)


def command(way: str, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start a child the given way."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if way in ("hash_seed", "both"):
        env["PYTHONHASHSEED"] = "0"
        interpreter = [sys.executable, "-s", "-P", "-B", "-u"]
    else:
        interpreter = [sys.executable, "-I", "-B", "-u"]
    if way in ("no_aslr", "both"):
        # Set in a short-lived interpreter that then execs the child: a personality is inherited.
        launcher = (
            f"import ctypes, os, sys; ctypes.CDLL(None).personality({ADDR_NO_RANDOMIZE}); "
            "os.execv(sys.argv[1], sys.argv[1:])"
        )
        return [sys.executable, "-I", "-c", launcher, *interpreter, *argv], env
    return [*interpreter, *argv], env


def measure(way: str, processes: int, rounds: int, block_steps: int, device: str, context_len: int, scale: str) -> dict:
    argv = [
        str(Path(__file__).resolve()),
        "--child",
        "--device",
        device,
        "--context",
        str(context_len),
        "--scale",
        scale,
    ]
    cmd, env = command(way, argv)
    children = [
        subprocess.Popen(cmd, env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    try:
        for proc in children:
            assert proc.stdout.readline().strip() == "ready", f"a child of way {way} did not start"
        cpu = sorted(os.sched_getaffinity(0))[-1]
        os.sched_setaffinity(0, {cpu})
        for proc in children:
            os.sched_setaffinity(proc.pid, {cpu})
        times: list[list[float]] = [[] for _ in children]
        for r in range(rounds):
            order = list(range(processes))
            order = order[r % processes :] + order[: r % processes]  # each takes each place in turn
            for i in order:
                children[i].stdin.write(f"{block_steps}\n")
                children[i].stdin.flush()
                times[i].append(float(children[i].stdout.readline()))
    finally:
        for proc in children:
            proc.stdin.close()
            proc.wait(timeout=60)
    medians = [statistics.median(t) for t in times]
    halves = [(statistics.median(t[: rounds // 2]), statistics.median(t[rounds // 2 :])) for t in times]
    # Within a process, the spread of its own blocks: a gap between processes much wider
    # than this is the process's, not the moment's.
    within = statistics.median(statistics.pstdev(t) / statistics.median(t) for t in times)
    first_rank = sorted(range(processes), key=lambda i: halves[i][0])
    second_rank = sorted(range(processes), key=lambda i: halves[i][1])
    return {
        "way": way,
        "processes": processes,
        "rounds": rounds,
        "block_steps": block_steps,
        "context_len": context_len,
        "median_ms": medians,
        "halves_ms": halves,
        "spread": max(medians) / min(medians) - 1,
        "within_process_rel_sd": within,
        "same_order_in_both_halves": first_rank == second_rank,
        "all_ms": times,
    }


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--scale", choices=("full", "smoke"), default="full")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block-steps", type=int, default=8)
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args(args)
    if options.child:
        child(TASK_DIR, options.device, options.context, options.scale)
        return 0
    record = []
    for way in options.ways:
        result = measure(
            way, options.processes, options.rounds, options.block_steps, options.device, options.context, options.scale
        )
        record.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "all_ms"}), flush=True)
    for result in record:
        medians = result["median_ms"]
        print(
            f"{result['way']:>9}: processes' medians {min(medians):.3f}-{max(medians):.3f} ms/step, spread "
            f"{result['spread'] * 100:.1f}% (within a process {result['within_process_rel_sd'] * 100:.1f}% sd), "
            f"same order in both halves: {result['same_order_in_both_halves']}"
        )
    if options.out:
        options.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
