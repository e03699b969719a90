"""Pieces of the GPU-side harness that need no model: statistics, launch classification,
the result channel, the disk cache."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from kagent.sandbox.bundle import promote_cache
from kagent.sandbox.harness import compare, kernelbench, launches, timing
from kagent.sandbox.harness.loading import DiskCache, TaskError
from kagent.sandbox.harness.protocol import KEY_BYTES, Channel, read_key
from kagent.sandbox.harness.step_checker import StepChecker
from kagent.sandbox.harness_child import authentic_event
from kagent.sandbox.results import Stats


def test_speedup_interval_contains_one_for_identical_distributions():
    rng = np.random.default_rng(1)
    a, b = rng.normal(10, 1, 200), rng.normal(10, 1, 200)
    result = timing.speedup_with_noise(a, b)
    assert result["within_noise"] and result["ci_low"] < 1.0 < result["ci_high"]


def test_drift_over_the_run_does_not_widen_the_interval():
    # The machine slows down twofold during the run (clocks, a neighbour); each pair of
    # back-to-back steps still sees the same conditions, so the paired ratio stays tight.
    rng = np.random.default_rng(3)
    drift = np.linspace(1.0, 2.0, 64)
    base = 10 * drift * rng.normal(1.0, 0.01, 64)
    cand = 10 * drift * rng.normal(1.0, 0.01, 64)
    result = timing.speedup_with_noise(base, cand)
    assert result["speedup"] == pytest.approx(1.0, abs=0.01) and result["within_noise"]
    assert result["blocks_ci_high"] - result["blocks_ci_low"] < 0.02


def test_the_interval_adds_the_spread_between_two_processes_to_the_blocks():
    # Blocks that agree to 0.1% still leave two processes of the same code about 1.5% apart
    # (timing.PROCESS_SPREAD): a 1.5% difference that tight is within noise, a 10% one is not.
    rng = np.random.default_rng(4)
    base = 10 * rng.normal(1.0, 0.001, 80)
    for factor, within in ((1.015, True), (1.10, False)):
        result = timing.speedup_with_noise(base, base / factor * rng.normal(1.0, 0.001, 80))
        assert result["blocks_ci_low"] > 1.0  # the blocks alone call it real
        assert result["within_noise"] is within, result
        half_width = math.log(result["ci_high"] / result["speedup"])
        assert half_width == pytest.approx(timing.Z_95 * timing.PROCESS_SPREAD, rel=0.05)
    none = timing.speedup_with_noise(base, base / 1.015, process_spread=0.0)
    assert not none["within_noise"] and none["ci_low"] == none["blocks_ci_low"]


def test_speedup_interval_excludes_one_for_a_real_difference():
    rng = np.random.default_rng(2)
    result = timing.speedup_with_noise(rng.normal(10, 0.5, 100), rng.normal(5, 0.25, 100))
    assert result["speedup"] == pytest.approx(2.0, rel=0.05)
    assert not result["within_noise"] and result["ci_low"] > 1.5


def test_an_abba_unit_cancels_the_cost_of_a_switch_between_processes():
    # The first block of each pair follows its own contestant's, the second the other's and
    # pays 5% for the switch: pairs alternate between 1.05 and 1/1.05 in an A/A run.
    first, second = 10.0, 10.5
    baseline = [first, second] * 16  # baseline first in even pairs (ABBA), second in odd ones
    candidate = [second, first] * 16
    assert timing.abba_units(baseline, candidate) == pytest.approx([1.0] * 16)
    result = timing.speedup_with_noise(baseline, candidate)
    assert result["speedup"] == pytest.approx(1.0) and result["blocks_ci_high"] - result["blocks_ci_low"] < 1e-9
    # A lone last pair stands alone.
    assert timing.abba_units([2.0, 2.0, 3.0], [1.0, 1.0, 1.0]).tolist() == [2.0, 3.0]


def test_summary_and_geomean():
    stats = timing.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats["median_ms"] == 3.0 and stats["n"] == 5 and stats["max_ms"] == 100.0
    assert timing.geomean([2.0, 8.0]) == pytest.approx(4.0)


def test_the_median_interval_narrows_with_more_blocks_and_ignores_an_outlier():
    rng = np.random.default_rng(1)
    few, many = (timing.summarize(list(1.0 + 0.02 * rng.standard_normal(n)) + [9.0]) for n in (8, 256))
    for stats in (few, many):
        assert stats["median_ci_low_ms"] <= stats["median_ms"] <= stats["median_ci_high_ms"]
        assert 0.97 < stats["median_ci_low_ms"] and stats["median_ci_high_ms"] < 1.03  # the 9.0 pulls no end
    width = {
        name: stats["median_ci_high_ms"] - stats["median_ci_low_ms"] for name, stats in (("few", few), ("many", many))
    }
    assert width["many"] < width["few"] / 2
    half = Stats(**many).median_half_width
    assert half is not None and half < 0.01
    assert Stats(**{k: v for k, v in many.items() if not k.startswith("median_ci")}).median_half_width is None


class _Process:
    """Stands in for a contestant's process: logs each request and answers a timed block
    with ``ms_per_step`` per step it ran."""

    def __init__(self, name, log, ms_per_step=1.0):
        self.name, self.log, self.ms_per_step = name, log, ms_per_step

    def request(self, message, what, probe=True):
        # A block's staging is not probed (the block that follows is the same process's own);
        # the block is (remote.ContestantProcess.request).
        assert probe == (message["op"] != "stage"), f"{message['op']} request with probe={probe}"
        if message["op"] == "stage":
            self.log.append(("stage", self.name, message["copies"]))
            return {}
        self.log.append(("block", self.name, message["first"], message["steps"], message["chains"], message["fresh"]))
        return {"block_ms": self.ms_per_step * message["steps"] * message["chains"]}


class _Recorder(timing.Contestant):
    """A contestant whose requests say which steps of which chain they run, and which logs
    every chain it is told is done."""

    def __init__(self, name, log, steps=5, ms_per_step=1.0):
        super().__init__(name, _Process(name, log, ms_per_step), steps)
        self.log = log

    def stage_request(self, copies):
        return {"op": "stage", "copies": copies}

    def block_request(self, first, count, chains, fresh):
        return {"op": "block", "first": first, "steps": count, "chains": chains, "fresh": fresh}

    def chain_done(self, steps_done, chains):
        self.log.append(("done", self.name, steps_done, chains))


def _blocks(log):
    return [entry[1:] for entry in log if entry[0] == "block"]


def test_blocks_alternate_abba_each_after_its_own_staging_and_chains_are_cut_into_blocks():
    log = []
    a, b = _Recorder("a", log), _Recorder("b", log)
    a.plan(2)
    b.plan(2)
    samples = timing.run_pairs([a, b], pairs=6)
    # Chains of 5 in blocks of 2: the rest of 1 joins the last block (2 + 3, not 2 + 2 + 1).
    assert _blocks(log) == [
        ("a", 0, 2, 1, True),
        ("b", 0, 2, 1, True),
        ("b", 2, 3, 1, False),
        ("a", 2, 3, 1, False),
        ("a", 0, 2, 1, True),
        ("b", 0, 2, 1, True),
        ("b", 2, 3, 1, False),
        ("a", 2, 3, 1, False),
        ("a", 0, 2, 1, True),
        ("b", 0, 2, 1, True),
        ("b", 2, 3, 1, False),
        ("a", 2, 3, 1, False),
    ]
    # Every timed block follows a staging request of its own: fresh copies where it starts a chain.
    for i, entry in enumerate(log):
        if entry[0] == "block":
            assert log[i - 1] == ("stage", entry[1], 1 if entry[5] else 0)
    # Each chain is done (checked) after its last block, untimed.
    assert [e[1] for e in log if e[0] == "done"] == ["b", "a"] * 3
    assert all(e[2:] == (5, 1) for e in log if e[0] == "done")
    # One value per block, in milliseconds per step.
    assert samples == {"a": [1.0] * 6, "b": [1.0] * 6}


def test_a_whole_chain_contestant_runs_several_fresh_chains_per_request_beside_the_others_blocks():
    log = []
    a, b = _Recorder("a", log), _Recorder("b", log, ms_per_step=0.5)
    a.plan(2)
    b.plan(5, 3)
    samples = timing.run_pairs([a, b], pairs=3)
    assert _blocks(log) == [
        ("a", 0, 2, 1, True),
        ("b", 0, 5, 3, True),
        ("b", 0, 5, 3, True),
        ("a", 2, 3, 1, False),
        ("a", 0, 2, 1, True),
        ("b", 0, 5, 3, True),
    ]
    assert ("stage", "b", 3) in log and ("done", "b", 5, 3) in log
    assert samples == {"a": [1.0] * 3, "b": [0.5] * 3}


def test_timing_that_stops_within_a_chain_checks_what_it_ran():
    log = []
    a = _Recorder("a", log, steps=7)
    a.plan(2)
    timing.run_pairs([a], pairs=2)
    assert [e for e in log if e[0] == "done"] == [("done", "a", 4, 1)]


def test_isolated_latency_is_a_chain_of_single_step_blocks_each_after_the_interlude():
    log = []
    interlude = lambda: log.append(("interlude",))  # noqa: E731
    assert timing.isolated_step_ms(_Recorder("a", log, ms_per_step=0.25), steps=3, interlude=interlude) == 0.25
    assert log == [
        ("interlude",),
        ("stage", "a", 1),
        ("block", "a", 0, 1, 1, True),
        ("interlude",),
        ("stage", "a", 0),
        ("block", "a", 1, 1, 1, False),
        ("interlude",),
        ("stage", "a", 0),
        ("block", "a", 2, 1, 1, False),
        ("done", "a", 3, 1),
    ]


# The warm-up's first request: the whole chain (16 steps here), so that every allocation of
# its growing state is made before the timing, in every contestant's process alike.
WHOLE_CHAIN_WARM_UP = [("stage", "a", 1), ("block", "a", 0, 16, 1, True)]


def test_a_host_bound_warm_up_is_the_whole_chain_then_a_short_request_neither_kept_nor_checked():
    log = []
    assert timing.warm_up(_Recorder("a", log, steps=16, ms_per_step=10.0), steps=2, host_bound_ms=5.0) == 10.0
    assert log == WHOLE_CHAIN_WARM_UP + [("stage", "a", 1), ("block", "a", 0, 2, 1, True)]


def test_a_fast_contestant_warms_up_once_more_over_enough_steps_to_say_its_pace():
    log = []
    assert timing.warm_up(_Recorder("a", log, steps=16, ms_per_step=0.25), steps=2, host_bound_ms=5.0) == 0.25
    assert log == WHOLE_CHAIN_WARM_UP + [
        ("stage", "a", 1),
        ("block", "a", 0, 2, 1, True),
        ("stage", "a", 1),
        ("block", "a", 0, timing.PACE_STEPS, 1, True),
    ]
    # Never longer than a chain, and a whole chain's warm-up is not checked either.
    log.clear()
    timing.warm_up(_Recorder("b", log, steps=4, ms_per_step=0.25), steps=2, host_bound_ms=5.0)
    assert log[-2:] == [("stage", "b", 1), ("block", "b", 0, 4, 1, True)]


@pytest.mark.parametrize(
    "step_ms, steps, expected",
    [
        (0.23, 32, (32, 2)),  # a fast kernel: 7.4 ms a chain, two in one request (10 ms at least)
        (0.23, 16, (16, 3)),
        (0.01, 16, (16, timing.MAX_CHAINS_PER_REQUEST)),  # no more than that, however fast
        (0.34, 32, (32, 1)),  # 30 steps would do: the chain in one block, not 30 + 2 (an H200, 2026-12-06)
        (1.0, 32, (10, 1)),  # 10 steps make a request long enough: blocks of 10, 10 and 12
        (2.0, 32, (5, 1)),  # 5 would do: blocks of 5, and the rest of 2 joins the last (7)
        (3.0, 32, (1, 1)),  # a quarter of a request or more: host-bound, single steps
        (10.0, 32, (1, 1)),  # host-bound (the baseline): single steps, many pairs
        (7.0, 32, (1, 1)),  # ... however fast the machine runs it that day
        (0.0, 32, (32, timing.MAX_CHAINS_PER_REQUEST)),  # faster than a request's noise
    ],
)
def test_a_block_lasts_long_enough_for_a_requests_fixed_cost(step_ms, steps, expected):
    assert timing.block_plan(step_ms, steps) == expected


def test_a_chain_never_ends_in_a_block_shorter_than_planned():
    # (an H200, 2026-12-06: a 2-step rest of a 32-step chain read 0.37-0.52 ms a step where
    # its 30-step blocks read 0.32.)
    log = []
    contestant = _Recorder("c", log, steps=10)
    contestant.plan(3)
    for _ in range(3):
        contestant.next_block()
    assert [entry[2:4] for entry in log if entry[0] == "block"] == [(0, 3), (3, 3), (6, 4)]
    assert contestant.position == 0  # the chain is done: the next block starts a new one
    log.clear()
    contestant.plan(1)  # single steps: every block one step
    for _ in range(10):
        contestant.next_block()
    assert [entry[3] for entry in log if entry[0] == "block"] == [1] * 10


def test_both_contestants_get_their_blocks_by_the_same_rule_and_pair_up():
    log = []
    base, cand = _Recorder("baseline", log, steps=8, ms_per_step=10.0), _Recorder("candidate", log, steps=8)
    result = timing.time_shape(base, cand, timing.Settings(rounds=2, warmup=2, isolated_steps=2), steps=8)
    # The baseline at 10 ms a step: single steps; the candidate at 1 ms: a chain of 8 is too
    # short for a request (10 ms), so two of them a request.
    assert (result["block_steps"], result["candidate_block_steps"], result["candidate_chains_per_request"]) == (1, 8, 2)
    assert result["pairs"] == 2 * 8 and len(result["baseline_samples_ms"]) == len(result["candidate_samples_ms"]) == 16
    assert result["speedup"] == pytest.approx(10.0) and result["candidate_isolated_ms"] == pytest.approx(1.0)


class _Evaluation:
    """What timing.time_contestants asks of an evaluation, recording the events it sends."""

    bw = None

    def __init__(self):
        self.events = []
        self.channel = self

    def clocks(self):
        return {}

    def contestant_pids(self):
        return []

    def send(self, kind, **fields):
        self.events.append((kind, fields))

    def send_check(self, name, status, detail="", **fields):
        return status == "pass"

    def phase(self, name):
        pass


def test_every_context_is_timed_over_as_many_steps_as_the_longest_chains_rounds(monkeypatch):
    monkeypatch.setattr(timing, "one_cpu_for_all", lambda pids: contextlib.nullcontext())
    log = []

    def shape(steps):
        return timing.Shape(
            check=f"timed_{steps}",
            label=f"{steps} steps",
            context_len=steps,
            steps=steps,
            contestants=lambda: (
                _Recorder("baseline", log, steps=steps, ms_per_step=10.0),
                _Recorder("candidate", log, steps=steps),
            ),
        )

    results = timing.time_contestants(
        _Evaluation(), [shape(8), shape(4), shape(3)], timing.Settings(rounds=2, warmup=1, isolated_steps=1)
    )
    assert results is not None
    # 2 rounds of the 8-step chain: 16 single-step pairs; the 4-step context runs 4 chains,
    # the 3-step one 5 (the nearest whole number of rounds: 15 steps).
    assert [(r["rounds"], r["pairs"]) for r in results] == [(2, 16), (4, 16), (5, 15)]


def test_one_cpu_for_all_while_timing_and_each_put_back_after():
    import os
    import subprocess
    import sys

    allowed = os.sched_getaffinity(0)
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2)]
    try:
        theirs = [os.sched_getaffinity(child.pid) for child in children]
        with timing.one_cpu_for_all([child.pid for child in children]):
            last = {max(allowed)}
            assert os.sched_getaffinity(0) == last
            assert all(os.sched_getaffinity(child.pid) == last for child in children)
        assert os.sched_getaffinity(0) == allowed
        assert [os.sched_getaffinity(child.pid) for child in children] == theirs
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_launch_classification():
    single = launches.classify([("cudaLaunchCooperativeKernel", False), ("decode_megakernel", True)])
    assert single["launches"] == 1 and single["single_launch"]
    many = launches.classify([("aten::mm", False)] + [("gemv_kernel", True)] * 3 + [("Memcpy DtoD", True)])
    assert many["launches"] == 4 and not many["single_launch"] and many["distinct_kernels"] == 2
    assert many["kernels"][0] == {"name": "gemv_kernel", "count": 3}
    graph = launches.classify([("cudaGraphLaunch", False), ("decode_megakernel", True)])
    assert graph["cuda_graph_replay"] and not graph["single_launch"]
    compiled = launches.classify([("Torch-Compiled Region: 0/0", False), ("triton_poi_fused_add_0", True)])
    assert compiled["torch_compile"] and not compiled["single_launch"]


def test_launch_counting_on_cpu_says_why_not():
    assert launches.count_launches(torch.device("cpu"), lambda: None)["launches"] is None


def test_profiled_events_record_the_step_without_importing_inductor():
    """The profiler under torch.profiler's wrapper: the wrapper's start imports Inductor, which
    was the whole of an evaluation's launches phase on H200 machines (1.7-6.3 s)."""
    code = (
        "import sys, torch\n"
        "from kagent.sandbox.harness.launches import profiled_events\n"
        "events = profiled_events(torch.device('cpu'), lambda: torch.ones(3).add_(1))\n"
        "names = [e.name for e in events]\n"
        "assert 'aten::add_' in names, names\n"
        "print('torch._inductor' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_channel_writes_valid_json_lines_even_for_nan():
    read_fd, write_fd = os.pipe()
    channel = Channel(write_fd)
    channel.send("timing", value=float("nan"), nested={"x": float("inf")})
    os.close(write_fd)
    line = os.read(read_fd, 4096).decode()
    os.close(read_fd)
    assert json.loads(line) == {"event": "timing", "value": "nan", "nested": {"x": "inf"}}


def test_cosine_survives_a_patched_torch(monkeypatch):
    a = torch.randn(100)
    monkeypatch.setattr(torch, "dot", lambda x, y: torch.tensor(1e9))
    monkeypatch.setattr(torch.nn.functional, "cosine_similarity", lambda *args, **kw: torch.tensor(1.0))
    assert compare.cosine(a, -a) == pytest.approx(-1.0)


def test_rows_finite_names_each_row():
    """The timed chains' check of finiteness gives each row what is_finite gives it."""
    rows = torch.randn(5, 40, dtype=torch.bfloat16)
    rows[1, 3] = float("nan")
    rows[3, 0] = float("-inf")
    rows[4] = 0.0
    assert compare.rows_finite(rows) == [True, False, True, False, True]
    assert compare.rows_finite(rows) == [compare.is_finite(row) for row in rows]


def test_disk_cache_roundtrip_and_torn_file(tmp_path):
    cache = DiskCache(tmp_path)
    value = {"w": torch.arange(6).reshape(2, 3)}
    built = cache.get_or_build("weights", "k", torch.device("cpu"), lambda: value)
    assert built is value and cache.misses == 1
    again = cache.get_or_build("weights", "k", torch.device("cpu"), lambda: pytest.fail("rebuilt"))
    assert torch.equal(again["w"], value["w"]) and cache.hits == 1
    (tmp_path / "weights" / "k.pt").write_bytes(b"torn")
    rebuilt = cache.get_or_build("weights", "k", torch.device("cpu"), lambda: value)
    assert rebuilt is value


# -- the signed result channel ----------------------------------------------------------------
def _signed_lines(key: bytes, events: list[dict]) -> list[bytes]:
    read_fd, write_fd = os.pipe()
    channel = Channel(write_fd, key)
    for event in events:
        channel.send(**event)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        return pipe.read().splitlines()


def test_signed_events_pass_and_anything_else_does_not():
    key = b"k" * KEY_BYTES
    lines = _signed_lines(key, [{"event": "check", "name": "load", "status": "pass"}, {"event": "done"}])
    assert [authentic_event(line, key, i) for i, line in enumerate(lines)] == [
        {"event": "check", "name": "load", "status": "pass"},
        {"event": "done"},
    ]
    assert authentic_event(lines[1], key, 0) is None  # out of sequence: a line left out or replayed
    assert authentic_event(lines[0], b"x" * KEY_BYTES, 0) is None  # another key
    forged = json.loads(lines[0])
    forged["status"] = "fail"
    assert authentic_event(json.dumps(forged).encode(), key, 0) is None  # a field changed
    assert authentic_event(b'{"event": "done"}', key, 0) is None  # unsigned
    assert authentic_event(b"not json", key, 0) is None


def test_the_key_is_read_from_its_pipe_and_the_pipe_closed():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"s" * KEY_BYTES)
    os.close(write_fd)
    assert read_key(read_fd) == b"s" * KEY_BYTES
    with pytest.raises(OSError):
        os.fstat(read_fd)
    short_read, short_write = os.pipe()
    os.write(short_write, b"short")
    os.close(short_write)
    with pytest.raises(ValueError):
        read_key(short_read)


# -- the cache: staged before the solution loads, promoted only if unchanged -------------------
def test_a_sealed_cache_stages_nothing_more(tmp_path):
    cache = DiskCache(tmp_path / "cache", tmp_path / "staging")
    cache.store("weights", "a", torch.ones(2))
    assert cache.load("weights", "a", torch.device("cpu")) is not None  # read back from staging
    assert list(cache.seal()) == ["weights/a.pt", "weights/a.pt.json"]  # the payload and its record
    cache.store("weights", "b", torch.ones(2))
    assert not (tmp_path / "staging" / "weights" / "b.pt").exists() and not (tmp_path / "cache").exists()
    assert cache.writable("bandwidth.json") is None


def test_only_files_sealed_unchanged_reach_the_cache(tmp_path):
    staging, cache = tmp_path / "staging", tmp_path / "cache"
    (staging / "weights").mkdir(parents=True)
    for name, text in (
        ("weights/a.pt", "good"),
        ("weights/late.pt", "staged after the seal"),
        ("bandwidth.json", "changed after the seal"),
    ):
        (staging / name).write_text(text)
    sealed = {
        "weights/a.pt": hashlib.sha256(b"good").hexdigest(),
        "bandwidth.json": hashlib.sha256(b"what the harness wrote").hexdigest(),
        "../escape.pt": hashlib.sha256(b"good").hexdigest(),
    }
    assert promote_cache(staging, cache, [{"event": "cache_sealed", "files": sealed}]) == ["weights/a.pt"]
    assert (cache / "weights" / "a.pt").read_text() == "good"
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == ["a.pt"]
    assert promote_cache(staging, cache, []) == []  # no seal event (a crash before it): nothing


def test_an_entry_staged_after_the_seal_reaches_the_cache_only_as_written(tmp_path):
    # The baseline's launch count, measured once the solution's process is gone: staged with
    # the hashes of the bytes the referee wrote, and promoted only where the file still has them.
    staging, root = tmp_path / "staging", tmp_path / "cache"
    cache = DiskCache(root, staging)
    cache.seal()
    files = cache.store_late("launches", "k", {"launches": 560})
    assert sorted(files) == ["launches/k.pt", "launches/k.pt.json"]
    assert files["launches/k.pt"] == hashlib.sha256((staging / "launches" / "k.pt").read_bytes()).hexdigest()
    tampered = cache.store_late("launches", "t", {"launches": 1})
    (staging / "launches" / "t.pt").write_bytes(b"another process's bytes")
    events = [
        {"event": "cache_sealed", "files": {}},
        {"event": "cache_staged", "files": files},
        {"event": "cache_staged", "files": tampered},
    ]
    promoted = sorted(promote_cache(staging, root, events))
    assert promoted == ["launches/k.pt", "launches/k.pt.json", "launches/t.pt.json"]
    # Read back in a later evaluation: the record vouches for the payload.
    assert DiskCache(root).load("launches", "k", torch.device("cpu")) == {"launches": 560}
    assert DiskCache(root).load("launches", "t", torch.device("cpu")) is None


def test_promotion_refuses_links_and_copies_the_bytes_it_hashed(tmp_path):
    # A solution may replace staged files with links to byte-identical copies in its HOME, or a
    # staged folder with a link: nothing reached through a link is promoted, and what is promoted
    # is a new file of the cache, which no later write to the staging folder changes.
    staging, cache, home = tmp_path / "staging", tmp_path / "cache", tmp_path / "home"
    for folder in (staging / "weights", staging / "outputs", home / "linked"):
        folder.mkdir(parents=True)
    (staging / "weights" / "good.pt").write_bytes(b"the referee's bytes")
    (home / "copy.pt").write_bytes(b"the referee's bytes")
    (staging / "weights" / "linked.pt").symlink_to(home / "copy.pt")
    (home / "linked" / "x.pt").write_bytes(b"the referee's bytes")
    (staging / "linked_folder").symlink_to(home / "linked", target_is_directory=True)
    os.mkfifo(staging / "outputs" / "fifo.pt")
    digest = hashlib.sha256(b"the referee's bytes").hexdigest()
    sealed = {
        name: digest for name in ("weights/good.pt", "weights/linked.pt", "linked_folder/x.pt", "outputs/fifo.pt")
    }
    assert promote_cache(staging, cache, [{"event": "cache_sealed", "files": sealed}]) == ["weights/good.pt"]
    promoted = cache / "weights" / "good.pt"
    assert not promoted.is_symlink() and promoted.read_bytes() == b"the referee's bytes"
    assert os.stat(promoted).st_ino != os.stat(staging / "weights" / "good.pt").st_ino
    (staging / "weights" / "good.pt").write_bytes(b"rewritten later")
    assert promoted.read_bytes() == b"the referee's bytes"


def test_the_cache_reads_no_link_and_keeps_no_mapping_of_its_files(tmp_path):
    root = tmp_path / "cache"
    DiskCache(root).store("outputs", "k", {"expected": torch.arange(1000, dtype=torch.float32)})
    loaded = DiskCache(root).load("outputs", "k", torch.device("cpu"))
    # Cut short and rewritten after the load, as a file reached through a link could be: the
    # referee's values are its own memory, neither killed (SIGBUS) nor changed.
    payload = root / "outputs" / "k.pt"
    size = payload.stat().st_size
    payload.write_bytes(b"")
    assert torch.equal(loaded["expected"], torch.arange(1000, dtype=torch.float32))
    # An entry that is a link to byte-identical copies (payload and record) is a miss.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    DiskCache(elsewhere).store("outputs", "k", {"expected": torch.arange(1000, dtype=torch.float32)})
    payload.unlink()
    payload.symlink_to(elsewhere / "outputs" / "k.pt")
    assert (elsewhere / "outputs" / "k.pt").stat().st_size == size
    cache = DiskCache(root)
    assert cache.find("outputs/k.pt") is None and cache.load("outputs", "k", torch.device("cpu")) is None
    (root / "outputs" / "k.pt.json").unlink()
    (root / "outputs" / "k.pt.json").symlink_to(elsewhere / "outputs" / "k.pt.json")
    payload.unlink()
    payload.write_bytes((elsewhere / "outputs" / "k.pt").read_bytes())
    assert DiskCache(root).load("outputs", "k", torch.device("cpu")) is None  # the record through a link


def test_a_wrong_row_appended_to_a_long_cache_fails_on_its_own():
    # One row of 2049 barely moves the whole cache's cosine; the appended rows are compared alone.
    g = torch.Generator().manual_seed(0)
    hidden_in, cache = torch.randn(8, generator=g), torch.randn(2048, 16, generator=g)
    new_row = torch.randn(1, 16, generator=g)
    checker = StepChecker(SimpleNamespace(threshold=0.98), reference=None)
    expected = [{"cache": torch.cat([cache, new_row]), "S": torch.ones(4)}]
    wrong = [{"cache": torch.cat([cache, -new_row]), "S": torch.ones(4)}]
    result = checker.compare(
        hidden_in, [{"cache": cache, "S": torch.ones(4)}], hidden_in + 1, wrong, hidden_in + 1, expected
    )
    assert result["cosines"]["L0.cache"] > 0.999 and result["cosines"]["L0.cache.appended"] == -1.0
    assert result["below_threshold"] == ["L0.cache.appended"] and not result["passed"]
    assert "L0.S.appended" not in result["cosines"]  # a tensor that keeps its shape has no appended rows


def _kernelbench_clock(device: str, timeout_s: float, spent_s: float) -> Any:
    """A KernelBench evaluation as far as its check of the time left reads it: the job's limit,
    the device, the calls a block, and when it began (``spent_s`` ago)."""
    evaluation = object.__new__(kernelbench.KernelBenchEvaluation)
    evaluation.job = SimpleNamespace(timeout_s=timeout_s)
    evaluation.device = torch.device(device)
    evaluation.calls = 1
    evaluation.began_at = time.perf_counter() - spent_s
    return evaluation


def test_time_spent_before_the_timing_is_said_as_such_and_a_gpu_is_not_advised_on_one():
    with pytest.raises(TaskError) as spent:
        _kernelbench_clock("cuda", timeout_s=100, spent_s=95)._check_time_left(call_ms=9)
    assert "took 95 s, all the 80 s its time limit leaves before the timing" in str(spent.value)
    assert "--device cuda" not in str(spent.value) and "x smaller" not in str(spent.value)
    with pytest.raises(TaskError) as slow:
        _kernelbench_clock("cpu", timeout_s=100, spent_s=0)._check_time_left(call_ms=5000)
    assert "inputs about" in str(slow.value) and "or on a GPU (--device cuda)" in str(slow.value)
    _kernelbench_clock("cpu", timeout_s=100, spent_s=0)._check_time_left(call_ms=1)  # fits: no error
