"""Why does one process run a host-bound step faster than another? (issues 9, 10)

An A/A evaluation on the H200 reads the baseline against itself, each in a process of its own,
and a whole evaluation came out biased (0.944-0.965 at every context of one run, 1.032-1.035
in another; the lab notebook (lab/notebook/), 2026-12-03), although both processes are timed on one and the
same CPU (``timing.one_cpu_for_all``). Suspects: where a process started (its memory is
placed where it first ran, and stays there after it is moved), its other threads, the device
(its allocations), and how its memory is laid out (hash seed, address randomization).

What it found on the H200 (rounds 6-8): one memory node and one L3, so not where a process
starts; only the main thread busy; the device time per step equal within 0.4%; and with one
hash seed and no address randomization for both, the pairs' spread fell to their own noise.
So both contestants now start laid out alike (``spawn.alike_python``).

This script times pairs of fresh processes (A and B, each building the flagship's baseline)
in ABBA order on one CPU, as the harness times its contestants, each pair started one way:

- ``anywhere``: no CPU set at start (as the harness starts them);
- ``timing_cpu``: both start on the timing CPU;
- ``apart``: A starts on the first CPU it may use, B on the timing CPU;
- ``helpers_off``: anywhere, and for timing each process's main thread on the timing CPU and
  all its other threads on the other CPUs;
- ``all_threads``: anywhere, and for timing every thread of both on the timing CPU;
- ``same_layout``: anywhere, with one fixed hash seed and no address-space randomization, so
  both processes lay out their memory alike (``process_spread.command``'s ``both``).
- ``history``: as ``same_layout``, and A first runs HISTORY_STEPS untimed steps from fresh
  states at every context, as the solution's process runs its checks before an evaluation's
  timing while the baseline's runs none: B over A above 1.00 would make that history the
  cause of the A/A's lean below 1.00 (32 of 48 per-context figures, the lab notebook (lab/notebook/)).

Only the main thread is moved otherwise (as ``timing.one_cpu_for_all`` does). Per pair it also
prints which of each process's threads used the CPU while the pair was timed, where, and how
often the main thread was preempted (nonvoluntary context switches), and each process's device
time per step from the profiler: where B's speed over A's follows their device times, the
difference is on the GPU; where the device times agree, it is on the host.

Per pair it prints B's speed over A's (the median ABBA unit, and its 95% bootstrap interval)
and how each process's memory lies across nodes (``/proc/PID/numa_maps``), and first the
machine's CPU, cache and node layout.

    python3 lab/scripts/pair_bias.py --device cuda --pairs 4 --quads 100 --out pairs.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import process_spread  # noqa: E402  (its child process is the one timed here)

# Steps profiled in each process for its device time per step, after its timed blocks.
DEVICE_STEPS = 10
MODES = ("anywhere", "timing_cpu", "apart", "helpers_off", "all_threads", "same_layout", "history")
# Steps of other states A runs before its timing in the "history" mode: about what an
# evaluation's checks run in the solution's process (12 fixed, 48 secret, 64 chained).
HISTORY_STEPS = 125


def layout() -> dict:
    """The machine's memory nodes with their CPUs, and the CPUs that share each last-level cache."""
    nodes = {}
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        nodes[node.name] = (node / "cpulist").read_text().strip()
    caches = set()
    for cpu in Path("/sys/devices/system/cpu").glob("cpu[0-9]*"):
        levels = sorted(cpu.glob("cache/index[0-9]*"), key=lambda p: int((p / "level").read_text()))
        if levels:
            caches.add((levels[-1] / "shared_cpu_list").read_text().strip())
    return {"nodes": nodes, "last_level_caches": sorted(caches), "allowed": sorted(os.sched_getaffinity(0))}


def pages_by_node(pid: int) -> dict[str, int]:
    """The pages of a process's memory on each node, from /proc/PID/numa_maps."""
    counts: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/numa_maps").read_text()
    except OSError:
        return counts
    for node, pages in re.findall(r"\b(N\d+)=(\d+)", text):
        counts[node] = counts.get(node, 0) + int(pages)
    return counts


def threads(pid: int) -> dict[int, dict]:
    """Each thread of a process: its name, the CPU it last ran on, its CPU time in ms so far and
    its nonvoluntary context switches (times it was preempted)."""
    ticks_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
        except OSError:
            continue  # it ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3, state, on
        preempted = re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status)
        found[int(task.name)] = {
            "name": name,
            "cpu": int(fields[36]),
            "cpu_ms": (int(fields[11]) + int(fields[12])) * ticks_ms,
            "preempted": int(preempted.group(1)) if preempted else 0,
        }
    return found


def place(pid: int, mode: str, timing_cpu: int, others: set[int]) -> None:
    """Move a process's threads for timing as ``mode`` says."""
    for tid in threads(pid):
        if tid == pid or mode == "all_threads":
            cpus = {timing_cpu}
        elif mode == "helpers_off":
            cpus = others
        else:
            continue
        with contextlib.suppress(ProcessLookupError):  # the thread ended
            os.sched_setaffinity(tid, cpus)


def while_timed(pid: int, before: dict[int, dict]) -> dict:
    """What a process's threads did between ``before`` and now: the main thread's preemptions,
    and each thread that used 20 ms of CPU or more, with where it last ran."""
    after = threads(pid)
    busy = []
    for tid, now in after.items():
        then = before.get(tid, {"cpu_ms": 0.0, "preempted": 0})
        used = now["cpu_ms"] - then["cpu_ms"]
        if used >= 20:
            busy.append({"tid": tid, "name": now["name"], "cpu": now["cpu"], "cpu_ms": used, "main": tid == pid})
    main_then = before.get(pid, {"preempted": 0})["preempted"]
    return {
        "threads": len(after),
        "main_preempted": after.get(pid, {"preempted": 0})["preempted"] - main_then,
        "busy": busy,
    }


def start(cmd: list[str], env: dict[str, str], cpu: Optional[int]) -> subprocess.Popen:
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    return subprocess.Popen(
        cmd, env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=pin
    )


def block_ms(proc: subprocess.Popen, steps: int, how: str = "") -> float:
    """A block of ``steps`` in ``proc``, ms per step: by the host's clock, or with ``how``
    "device " the device's busy time by the profiler."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{how}{steps}\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def speed_of_b(a_ms: list[float], b_ms: list[float], rng: np.random.Generator) -> dict:
    """B's speed over A's per ABBA unit (A's time / B's time, the geometric mean of its two
    pairs), its median and a 95% bootstrap interval of that median."""
    a, b = np.asarray(a_ms), np.asarray(b_ms)
    units = np.sqrt((a[0::2] / b[0::2]) * (a[1::2] / b[1::2]))
    medians = np.median(rng.choice(units, size=(2000, units.size)), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return {
        "speed": float(np.median(units)),
        "low": float(low),
        "high": float(high),
        "a_median_ms": float(np.median(a_ms)),
        "b_median_ms": float(np.median(b_ms)),
    }


def one_pair(
    mode: str,
    quads: int,
    block_steps: int,
    argv: list[str],
    timing_cpu: int,
    first_cpu: int,
    others: set[int],
    rng: np.random.Generator,
) -> dict:
    cmd, env = process_spread.command("both" if mode in ("same_layout", "history") else "isolated", argv)
    cpus = {"timing_cpu": (timing_cpu, timing_cpu), "apart": (first_cpu, timing_cpu)}.get(mode, (None, None))
    pair = [start(cmd, env, cpu) for cpu in cpus]
    try:
        for proc in pair:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "a child did not start"
        memory = [pages_by_node(proc.pid) for proc in pair]
        if mode == "history":
            block_ms(pair[0], HISTORY_STEPS, "history ")
        for proc in pair:
            place(proc.pid, mode, timing_cpu, others)
        before = [threads(proc.pid) for proc in pair]
        a_ms: list[float] = []
        b_ms: list[float] = []
        for _ in range(quads):  # A B B A
            a_ms.append(block_ms(pair[0], block_steps))
            b_ms.append(block_ms(pair[1], block_steps))
            b_ms.append(block_ms(pair[1], block_steps))
            a_ms.append(block_ms(pair[0], block_steps))
        seen = [while_timed(proc.pid, then) for proc, then in zip(pair, before, strict=True)]
        device = [block_ms(proc, DEVICE_STEPS, "device ") for proc in pair]
    finally:
        for proc in pair:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    return {
        "mode": mode,
        "started_on": list(cpus),
        "pages_by_node": memory,
        "while_timed": seen,
        "device_ms": device,
        "device_b_over_a": device[0] / device[1] if all(device) else None,
        **speed_of_b(a_ms, b_ms, rng),
    }


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--scale", choices=("full", "smoke"), default="full")
    parser.add_argument("--pairs", type=int, default=4, help="fresh pairs of processes per mode")
    parser.add_argument("--quads", type=int, default=100, help="ABBA units timed per pair")
    parser.add_argument("--block-steps", type=int, default=1)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args(args)
    machine = layout()
    print(json.dumps(machine), flush=True)
    allowed = machine["allowed"]
    timing_cpu, first_cpu = allowed[-1], allowed[0]
    others = set(allowed[:-1]) or {timing_cpu}
    os.sched_setaffinity(0, {timing_cpu})  # the driver sleeps in a read while a child runs, as the referee does
    argv = [
        str(SCRIPTS / "process_spread.py"),
        "--child",
        "--device",
        options.device,
        "--context",
        str(options.context),
        "--scale",
        options.scale,
    ]
    rng = np.random.default_rng(0)
    results = []
    for round_index in range(options.pairs):
        for mode in options.modes:  # the modes interleaved, so the machine's drift falls on each
            result = one_pair(mode, options.quads, options.block_steps, argv, timing_cpu, first_cpu, others, rng)
            result["round"] = round_index
            results.append(result)
            print(
                f"{mode:>10} #{round_index}: B/A speed {result['speed']:.3f} [{result['low']:.3f}, "
                f"{result['high']:.3f}]  A {result['a_median_ms']:.2f} ms  B {result['b_median_ms']:.2f} ms  "
                f"device B/A speed {result['device_b_over_a'] or 0:.3f} ({result['device_ms'][0]:.3f}, "
                f"{result['device_ms'][1]:.3f} ms)  "
                f"pages {result['pages_by_node']}",
                flush=True,
            )
            for who, seen in zip("AB", result["while_timed"], strict=True):
                busy = ", ".join(f"{t['name']}@{t['cpu']} {t['cpu_ms']:.0f} ms" for t in seen["busy"])
                print(
                    f"            {who}: {seen['threads']} threads, main preempted {seen['main_preempted']}x; "
                    f"busy: {busy}",
                    flush=True,
                )
    for mode in options.modes:
        speeds = [r["speed"] for r in results if r["mode"] == mode]
        outside = sum(not (r["low"] <= 1.0 <= r["high"]) for r in results if r["mode"] == mode)
        print(
            f"{mode:>10}: B/A {min(speeds):.3f}-{max(speeds):.3f}, median {float(np.median(speeds)):.3f}; "
            f"{outside} of {len(speeds)} pairs' intervals exclude 1.00"
        )
    if options.out:
        options.out.write_text(json.dumps({"machine": machine, "pairs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
