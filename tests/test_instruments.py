"""The stage instruments on the CPU: the stages tool's sweep, stamps and table (a Python
stand-in for a single-launch kernel follows the convention), the reference's intermediates
dumped and compared, and Nsight Compute's report on a standalone kernel file parsed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from kagent.sandbox.evaluate import EvalOptions
from kagent.sandbox.instruments.stages import declared_stages, resolve_bytes, stamp_times, sweep_points
from kagent.tasks import resolve_task
from kagent.tools import default_tools
from kagent.tools.base import ToolContext, cap, scrubbed_env
from kagent.tools.ncu import details_text, parse_ncu_details
from kagent.tools.stages import stage_table

from conftest import install_fake_ncu, reference_solution

TOOLS = {tool.spec.name: tool for tool in default_tools()}

PROBLEM = """import torch

class Model(torch.nn.Module):
    def forward(self, a, b):
        return a.sum() + b.sum()

def get_inputs():
    return [torch.randn(1 << 20), torch.randn(1 << 21)]

def get_init_inputs():
    return []
"""
# A stand-in for a two-stage single-launch kernel, as the convention asks: stage 0 reads a,
# stage 1 reads b; the knob stops the work after a stage; two "CTAs" stamp each barrier. It
# logs the knob at every call, so that the test sees the sweep.
TWO_STAGES = """import time
from pathlib import Path

import torch

KNOB_LOG = Path(__file__).with_name("knob.log")


class ModelNew(torch.nn.Module):
    kagent_stages = [{"name": "read a", "bytes": 4 << 20}, {"name": "read b", "bytes": 8 << 20}]

    def __init__(self):
        super().__init__()
        self.kagent_stop_after = None
        self.kagent_stamps = torch.zeros(3, 2, dtype=torch.int64)

    def _stamp(self, row):
        for cta in range(2):
            self.kagent_stamps[row, cta] = time.perf_counter_ns()

    def forward(self, a, b):
        with KNOB_LOG.open("a") as log:
            log.write(f"{self.kagent_stop_after}\\n")
        stop = 1 if self.kagent_stop_after is None else self.kagent_stop_after
        out = a.new_zeros(())
        self._stamp(0)
        if stop >= 0:
            out = out + a.sum()
        self._stamp(1)
        if stop >= 1:
            out = out + b.sum()
        self._stamp(2)
        return out
"""


@pytest.fixture
def kernelbench_ctx(tmp_path: Path, kagent_home: Path) -> ToolContext:
    (tmp_path / "two_reads.py").write_text(PROBLEM)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "solution.py").write_text(TWO_STAGES)
    task = resolve_task(str(tmp_path / "two_reads.py"))
    return ToolContext(
        workspace=workspace, task=task, eval_options=EvalOptions(device="cpu", scale="smoke", cache_dir=kagent_home)
    )


@pytest.fixture
def kimi_ctx(tmp_path: Path, kimi, kagent_home: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    (workspace / "task").mkdir(parents=True)
    return ToolContext(
        workspace=workspace, task=kimi, eval_options=EvalOptions(device="cpu", scale="smoke", cache_dir=kagent_home)
    )


def kimi_parts(kimi) -> dict[str, int]:
    from kagent.sandbox.harness.decode_task import Task

    task = Task(kimi.path, "full", torch.device("cpu"))
    parts = task.roofline.bytes_by_part(task.cfg, 2048)
    assert sum(parts.values()) == task.roofline.bytes_per_step(task.cfg, 2048)
    return parts


# -- the convention's pieces ------------------------------------------------------------------
def test_declared_stages_and_their_bytes(kimi):
    class Model:
        kagent_stages = [
            "plain",
            {"name": "own bytes", "bytes": 1000},
            {"name": "L3 attention", "parts": ["L3.attn.*"]},
        ]

    stages = declared_stages(Model(), 2048)
    parts = kimi_parts(kimi)
    mla = sum(v for k, v in parts.items() if k.startswith("L3.attn."))
    assert resolve_bytes(stages, parts) == [None, 1000, mla]
    assert mla > (2048 + 1) * 576 * 2  # the cache and the projections

    class ByContext:
        def kagent_stages(self, context_len):
            return [{"name": f"ctx {context_len}", "bytes": context_len}]

    assert declared_stages(ByContext(), 8192) == [{"name": "ctx 8192", "bytes": 8192}]
    for bad, message in (
        (None, "declares no stages"),
        ([], "is empty"),
        ([{"bytes": 3}], "must be a name"),
        ([{"name": "x", "colour": 1}], "must be a name"),
    ):

        class Bad:
            kagent_stages = bad

        with pytest.raises(ValueError, match=message):
            declared_stages(Bad(), None)
    with pytest.raises(ValueError, match="matches none of the task's parts"):
        resolve_bytes([{"name": "x", "parts": ["L9.*"]}], parts)


def test_sweep_points_and_stamp_times():
    assert sweep_points(3) == [-1, 0, 1, 2]
    # Two CTAs: start at 0 and 1000 ns; stage 0's barrier reached at 5000 / 6000; stage 1's at 9000 / 9500.
    times = stamp_times([[0, 1000], [5000, 6000], [9000, 9500]])
    assert times == [{"us": 6.0, "spread_us": 1.0}, {"us": 3.5, "spread_us": 0.5}]


def test_stage_table_adds_up_and_says_when_it_does_not():
    result = {
        "device": "cuda:0",
        "context_len": 2048,
        "steps": 20,
        "rounds": 3,
        "stages": [{"name": "stream a"}, {"name": "stream b"}],
        "stage_bytes": [150_000_000, 100_000_000],
        "floor_bytes": 250_000_000,
        "floor_from": "the task's roofline",
        "bandwidth_bytes_per_s": 4.0e12,
        "sweep_us": {"-1": 3.0, "0": 43.0, "1": 73.0},
        "full_us": 73.5,
        "steady_us": 74.0,
        "stamps": [{"us": 39.0, "spread_us": 0.8}, {"us": 29.5, "spread_us": 0.4}],
        "stamps_note": "",
    }
    table = stage_table(result)
    lines = table.splitlines()
    assert lines[2] == " - | launch and barriers alone | 3.0 | | | | | |"
    # stage 0: 40 µs for 150 MB = 3750 GB/s, 60% of the floor's bytes, its floor 37.5 µs = 94%
    assert lines[3] == " 0 | stream a | 40.0 | 39.0 | 0.8 | 150.0 MB | 3750 | 60.0% | 94%"
    assert lines[4] == " 1 | stream b | 30.0 | 29.5 | 0.4 | 100.0 MB | 3333 | 40.0% | 83%"
    assert "= 73.0 µs; the whole step: 73.5 µs of device time, 74.0 µs per step back to back (99% of it)" in table
    assert "stamped stages add up to 68.5 µs (93% of the step's device time" in table
    assert "bytes floor 250.0 MB (the task's roofline) at 4.00 TB/s = 62.5 µs" in table
    assert "not the sum of its stages" not in table
    host_bound = stage_table({**result, "steady_us": 160.0, "stamps": [], "stamps_note": "no buffer"})
    assert "more than 10% apart" in host_bound and "host-bound" in host_bound and "stamps: no buffer" in host_bound
    assert "by kind" not in table  # no two stages alike


def test_stages_named_alike_but_for_their_numbers_are_summed_by_kind():
    names = ["L0 KDA_IN", "L0 MOE_UP", "L1 KDA_IN", "L1 MOE_UP", "L2 KDA_IN", "L3 MLA_ATTEND"]
    sweep = {"-1": 10.0}
    for i, us in enumerate([16.0, 16.5, 15.8, 16.2, 16.1, 21.7]):
        sweep[str(i)] = sweep[str(i - 1)] + us
    result = {
        "device": "cuda:0",
        "context_len": 2048,
        "steps": 20,
        "rounds": 3,
        "stages": [{"name": n} for n in names],
        "stage_bytes": [20_000_000, 20_000_000, 20_000_000, 20_000_000, 20_000_000, None],
        "floor_bytes": 100_000_000,
        "floor_from": "the task's roofline",
        "bandwidth_bytes_per_s": 4.0e12,
        "sweep_us": sweep,
        "full_us": sweep["5"],
        "steady_us": sweep["5"],
        "stamps": [{"us": 16.0, "spread_us": 0.5}] * 6,
        "stamps_note": "",
    }
    lines = stage_table(result).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("by kind"))
    # KDA_IN: three stages, 47.9 µs, 60 MB = 1253 GB/s; MOE_UP two; a lone stage is no kind.
    assert lines[at + 1 : at + 3] == [
        "  L# KDA_IN | 3 | 47.9 | 48.0 | 60.0 MB | 1253",
        "  L# MOE_UP | 2 | 32.7 | 32.0 | 40.0 MB | 1223",
    ]
    assert not lines[at + 3].startswith("  L# MLA")


# -- the tool, end to end on the CPU -------------------------------------------------------------
def test_stages_tool_sweeps_the_knob_and_reads_the_stamps(kernelbench_ctx: ToolContext):
    out = TOOLS["stages"].run({"steps": 3, "rounds": 2}, kernelbench_ctx)
    assert not out.is_error, out.content
    lines = out.content.splitlines()
    assert lines[0].startswith(
        "stages of the solution on cpu: time (the host's clock: no device here) per step, median of 3 steps x 2 rounds"
    )
    assert lines[2].startswith(" - | launch and barriers alone | ")
    assert lines[3].startswith(" 0 | read a | ") and "| 4.2 MB |" in lines[3]
    assert lines[4].startswith(" 1 | read b | ") and "| 8.4 MB |" in lines[4]
    assert "stamped stages add up to" in out.content
    assert "bytes floor 0.0 MB" not in out.content  # the solution has no weights: no floor line
    assert [row["name"] for row in out.data["stages"]] == ["read a", "read b"]
    knobs = (kernelbench_ctx.workspace / "knob.log").read_text().split()
    # one warm-up step, then per round and point a warm-up and 3 timed steps; then the knob is off again
    sweep = [k for k in knobs[1 : 1 + 2 * 3 * 4]]
    assert sweep == [str(p) for _ in range(2) for p in (-1, 0, 1) for _ in range(4)]
    assert set(knobs[1 + 2 * 3 * 4 :]) == {"None"}


def test_stages_tool_on_the_flagship_with_the_tasks_parts(kimi_ctx: ToolContext, kimi):
    reference_solution(
        kimi, kimi_ctx.workspace, patch='Model.kagent_stages = [{"name": "the whole step", "parts": ["L*"]}]\n'
    )
    kimi_ctx.env = {**scrubbed_env(), "PATH": str(Path(sys.executable).parent)}
    out = TOOLS["stages"].run({"steps": 2, "rounds": 1}, kimi_ctx)
    assert not out.is_error, out.content
    assert ", context 16:" in out.content.splitlines()[0]
    assert " 0 | the whole step | " in out.content and "| 100.0% |" in out.content  # every part: the floor
    assert "(the task's roofline)" in out.content and "the solution keeps no kagent_stamps buffer" in out.content


def test_stages_tool_without_stages_says_how_to_declare_them(kimi_ctx: ToolContext, kimi):
    reference_solution(kimi, kimi_ctx.workspace)
    out = TOOLS["stages"].run({"steps": 2, "rounds": 1}, kimi_ctx)
    assert out.is_error and "declares no stages" in out.content and "kagent_stages" in out.content
    (kimi_ctx.workspace / "solution.py").unlink()
    assert "write it first" in TOOLS["stages"].run({}, kimi_ctx).content


# -- the reference's intermediates ------------------------------------------------------------------
def test_reference_dump_records_every_layer_and_stage(kimi_ctx: ToolContext):
    out = TOOLS["reference_dump"].run({"seed": 1}, kimi_ctx)
    assert not out.is_error, out.content
    saved = torch.load(kimi_ctx.workspace / "build" / "reference_intermediates.pt", weights_only=True)
    for name in (
        "model.step.in0",
        "model.step.in1.L0.S",
        "model.step.out0",
        "model.step.out1.L3.c_kv",
        "blocks.0.norm.out",
        "blocks.0.attn.q_proj.out",
        "blocks.0.attn.short_conv#2.out0",
        "blocks.0.attn.o_proj.in0",
        "blocks.3.attn.kv_a.out",
        "blocks.3.attn.step.out",
        "blocks.2.moe.ffn.in4",
        "blocks.3.moe.step.out",
        "blocks.3.step.out",
    ):
        assert name in saved, name
    # The state as the step received it, not as the step left it (it is changed in place).
    assert not torch.equal(saved["model.step.in1.L0.S"], saved["model.step.out1.L0.S"])
    assert saved["model.step.out1.L3.c_kv"].shape[0] == saved["model.step.in1.L3.c_kv"].shape[0] + 1
    assert torch.equal(saved["blocks.3.step.out"], saved["model.step.out0"])
    assert out.content.startswith(
        f"the reference's intermediates for seed 1 (context 16, cpu): {len(saved)} values, "
        "saved to build/reference_intermediates.pt"
    )
    assert "more rows: narrow them with names" in out.content
    narrowed = TOOLS["reference_dump"].run({"seed": 1, "names": "blocks.3.attn.kv_a.*"}, kimi_ctx)
    assert narrowed.content.splitlines()[2:] == [
        line for line in narrowed.content.splitlines()[2:] if line.startswith("blocks.3.attn.kv_a.")
    ]
    assert len(narrowed.content.splitlines()) == 4  # title, header, in0 and out


def test_reference_dump_compares_a_solutions_values(kimi_ctx: ToolContext):
    assert not TOOLS["reference_dump"].run({"save_as": "build/ref.pt"}, kimi_ctx).is_error
    values = torch.load(kimi_ctx.workspace / "build" / "ref.pt", weights_only=True)
    mine = {
        name: values[name].clone()
        for name in ("blocks.0.attn.q_proj.out", "blocks.0.attn.k_proj.out", "blocks.0.moe.ffn#1.in4")
    }
    mine["blocks.0.attn.k_proj.out"] = -mine["blocks.0.attn.k_proj.out"]  # wrong from here on
    mine["my.own.value"] = torch.zeros(3)
    torch.save(mine, kimi_ctx.workspace / "mine.pt")
    out = TOOLS["reference_dump"].run({"save_as": "build/ref.pt", "compare": "mine.pt"}, kimi_ctx)
    assert not out.is_error, out.content
    lines = out.content.splitlines()
    assert lines[1].startswith(
        f"compared 3 values by name; {len(values) - 3} of the reference's are not in your "
        "file; yours only: my.own.value"
    )
    assert lines[2] == "first that differs (cosine below 0.999): blocks.0.attn.k_proj.out"
    rows = {line.split(" | ")[0]: line for line in lines[4:]}
    assert " | 1.000000 | 0 | " in rows["blocks.0.attn.q_proj.out"]
    assert " | -1.000000 | " in rows["blocks.0.attn.k_proj.out"] and rows["blocks.0.attn.k_proj.out"].endswith(
        "<- differs"
    )
    assert "| integers" in rows["blocks.0.moe.ffn#1.in4"]
    missing = TOOLS["reference_dump"].run({"compare": "nothing.pt"}, kimi_ctx)
    assert missing.is_error and "no file nothing.pt" in missing.content
    torch.save([1, 2], kimi_ctx.workspace / "list.pt")
    wrong = TOOLS["reference_dump"].run({"compare": "list.pt"}, kimi_ctx)
    assert wrong.is_error and "not a dict of tensors by name" in wrong.content
    assert TOOLS["reference_dump"].run({"save_as": "task/x.pt"}, kimi_ctx).is_error  # task/ is read-only


# -- Nsight Compute on a standalone kernel file ----------------------------------------------------
NCU_HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name",'
    '"Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"'
)


def ncu_row(
    section: str,
    metric: str = "",
    unit: str = "",
    value: str = "",
    rule: str = "",
    kind: str = "",
    description: str = "",
    speedup: str = "",
    launch: int = 0,
) -> str:
    cells = [
        str(launch),
        "4242",
        "python3",
        "127.0.0.1",
        "two_stage_kernel",
        "1",
        "7",
        "(128, 1, 1)",
        "(132, 1, 1)",
        "0",
        "9.0",
        section,
        metric,
        unit,
        value,
        rule,
        kind,
        description,
        "global" if speedup else "",
        speedup,
    ]
    return ",".join(f'"{c}"' for c in cells)


NCU_CSV = "\n".join(
    [
        "==PROF== Connected to process 4242",
        NCU_HEADER,
        ncu_row("GPU Speed Of Light Throughput", "Duration", "usecond", "61.50"),
        ncu_row("GPU Speed Of Light Throughput", "DRAM Throughput", "%", "88.10"),
        ncu_row("Occupancy", "Achieved Occupancy", "%", "12.40"),
        ncu_row("Source Counters", "Branch Instructions", "inst", "1,024"),
        ncu_row(
            "Occupancy",
            rule="AchievedOccupancy",
            kind="OPT",
            description="The difference between  calculated and achieved occupancy...",
            speedup="37.5",
        ),
        ncu_row("GPU Speed Of Light Throughput", "Duration", "usecond", "60.90", launch=1),
        "==PROF== Disconnected from process 4242",
    ]
)


def test_parse_a_report_of_the_h200():
    # Rows of a real report (the two-stage kernel on the H200, 2026-12-01; see the lab notebook (lab/notebook/)),
    # with a line break inside a quoted field, and ncu's own lines around the CSV.
    text = (Path(__file__).parent / "ncu_details_h200.csv").read_text()
    (launch,) = parse_ncu_details("==PROF== Connected to process 26\n" + text + "==PROF== Disconnected\n")
    assert launch["kernel"] == "_two_stages" and launch["grid"] == "(264, 1, 1)" and launch["block"] == "(256, 1, 1)"
    assert ("Duration", "236,448", "ns") in launch["sections"]["GPU Speed Of Light Throughput"]
    assert [r["name"] for r in launch["rules"]] == [
        "SOLBottleneck",
        "SOLFPRoofline",
        "TheoreticalOccupancy",
        "UncoalescedGlobalAccess",
    ]
    assert "line break" in launch["rules"][0]["description"]
    text = details_text([launch], None, "build/ncu_probe.csv")
    assert "[OPT] UncoalescedGlobalAccess (estimated speedup 69.67%)" in text and "[INF]" not in text


def test_parse_ncu_details_and_the_text():
    launches = parse_ncu_details(NCU_CSV)
    assert [launch["id"] for launch in launches] == ["0", "1"]
    first = launches[0]
    assert first["kernel"] == "two_stage_kernel" and first["grid"] == "(132, 1, 1)"
    assert first["sections"]["GPU Speed Of Light Throughput"] == [
        ("Duration", "61.50", "usecond"),
        ("DRAM Throughput", "88.10", "%"),
    ]
    assert first["rules"] == [
        {
            "type": "OPT",
            "name": "AchievedOccupancy",
            "section": "Occupancy",
            "description": "The difference between calculated and achieved occupancy...",
            "speedup": "37.5",
        }
    ]
    text = details_text(launches, None, "build/ncu_k.csv").splitlines()
    assert text[0] == "Nsight Compute, 2 launch(es); the whole report is in build/ncu_k.csv"
    # The metrics, then the advice.
    assert text[3] == "-- GPU Speed Of Light Throughput"
    assert "[OPT] AchievedOccupancy (estimated speedup 37.5%): The difference between calculated" in text[9]
    assert "   DRAM Throughput: 88.10 %" in text and "   Achieved Occupancy: 12.40 %" in text
    assert "other sections (metrics; ask for them with sections=...): Source Counters (1)" in text
    picked = details_text(launches, "source", "x")
    assert "   Branch Instructions: 1,024 inst" in picked and "DRAM Throughput" not in picked


def test_a_megakernel_s_report_keeps_its_stalls_and_spills_within_the_tool_s_cap():
    # Rows of kagent's megakernel's report on the H200 (2026-12-04, the lab notebook (lab/notebook/)): 12 KB of
    # text, in which Nsight Compute prints occupancy charts as series of up to 2 KB. Within the
    # 8000 characters a tool may return, the warp stalls and the spills must survive the cut.
    text = (Path(__file__).parent / "ncu_details_megakernel_h200.csv").read_text()
    (launch,) = parse_ncu_details(text)
    shown = cap(details_text([launch], None, "build/ncu_probe.csv"), ToolContext.max_output_chars)
    for line in (
        "   Stall Barrier: 2.74 inst",
        "   Stall Long Scoreboard: 2.44 inst",
        "   Eligible Warps Per Scheduler: 0.28 warp",
        "   Local Memory Spilling Requests: 418,160",
        "   DRAM Throughput: 13.27 %",
    ):
        assert line in shown.splitlines(), line
    whole = details_text([launch], None, "x")
    assert "   # Warps Per Register Count: 2,056 (a series of 257 values: in the CSV)" in whole.splitlines()
    assert "metrics at zero not shown" in whole and "SM: Pipe Fp64 Cycles Active" not in whole
    assert "SM: Pipe Fp64 Cycles Active" in details_text([launch], "light", "x")  # asked for: every metric


def test_ncu_kernel_tool(kimi_ctx: ToolContext):
    (kimi_ctx.workspace / "probe.py").write_text("print('launching')\n")
    no_ncu = {**scrubbed_env(), "PATH": str(Path(sys.executable).parent)}
    kimi_ctx.env = no_ncu
    out = TOOLS["ncu_kernel"].run({"path": "probe.py"}, kimi_ctx)
    assert out.is_error and "ncu not on PATH" in out.content
    # A stand-in ncu, where the jail lets the command see it: records how it was called, prints a report.
    bin_dir = kimi_ctx.workspace / "bin"
    install_fake_ncu(bin_dir, NCU_CSV + "\n", kimi_ctx.workspace / "ncu_argv.txt")
    kimi_ctx.env = {**no_ncu, "PATH": f"{bin_dir}:{no_ncu['PATH']}:/usr/bin:/bin"}
    on_cpu = TOOLS["ncu_kernel"].run({"path": "probe.py"}, kimi_ctx)
    assert on_cpu.is_error and "needs a CUDA device" in on_cpu.content
    kimi_ctx.eval_options = kimi_ctx.eval_options.model_copy(update={"device": "cuda"})
    out = TOOLS["ncu_kernel"].run(
        {"path": "probe.py", "kernel": "two_stage", "launch_skip": 2, "arguments": ["--size", "big"]}, kimi_ctx
    )
    assert not out.is_error, out.content
    argv = (kimi_ctx.workspace / "ncu_argv.txt").read_text().split()
    assert argv[:14] == [
        "--set",
        "full",
        "--csv",
        "--page",
        "details",
        "--print-details",
        "all",
        "--clock-control",
        "none",
        "--launch-skip",
        "2",
        "--launch-count",
        "1",
        "--log-file",
    ]
    assert argv[15:17] == ["--kernel-name", "regex:two_stage"]
    assert argv[-3].endswith("probe.py") and argv[-2:] == ["--size", "big"]
    assert "the whole report is in build/ncu_probe.csv" in out.content
    assert (kimi_ctx.workspace / "build" / "ncu_probe.csv").read_text().startswith('"ID"')
    for bad, message in (
        ({"path": "probe.py", "section_set": "everything"}, "section_set must be one of"),
        ({"path": "missing.py"}, "no file missing.py"),
        ({"path": "task"}, "not a .py or .cu"),
    ):
        refused = TOOLS["ncu_kernel"].run(bad, kimi_ctx)
        assert refused.is_error and message in refused.content, refused.content


BATCHNORM_PROBLEM = """import torch

class Model(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x)

def get_inputs():
    return [torch.randn(16, 4) * 3 + 1]

def get_init_inputs():
    return [4]
{eval_mode}"""


@pytest.mark.parametrize("eval_mode", [False, True])
def test_kernelbench_instrument_steps_build_and_feed_as_the_grading_does(tmp_path: Path, eval_mode: bool):
    """The instruments' reference and solution steps of a KernelBench file: in the mode the
    grading uses (training, as KernelBench leaves a module, unless the file says EVAL_MODE),
    on the inputs the grading draws for the seed."""
    from types import SimpleNamespace

    from kagent.sandbox.harness.kernelbench import KernelBenchSteps, fresh_inputs
    from kagent.sandbox.harness.loading import load_module
    from kagent.tasks import KINDS

    task = tmp_path / "bn.py"
    task.write_text(BATCHNORM_PROBLEM.format(eval_mode="EVAL_MODE = True\n" if eval_mode else ""))
    solution = tmp_path / "solution.py"
    solution.write_text(BATCHNORM_PROBLEM.format(eval_mode="").replace("class Model(", "class ModelNew("))
    kind = SimpleNamespace(model_class=KINDS["kernelbench"].model_class)
    job = SimpleNamespace(task=str(task), solution=str(solution), seed=7, kind=kind)
    device = torch.device("cpu")
    steps = KernelBenchSteps()
    reference, run_reference, _ = steps.reference_step(job, device)
    solution_model, run_solution, _ = steps.solution_step(job, device)
    assert reference.training is not eval_mode and solution_model.training is not eval_mode
    (drawn,) = fresh_inputs(load_module("bn_problem", task), 7, device)
    with torch.no_grad():
        expected = torch.nn.functional.batch_norm(
            drawn, torch.zeros(4), torch.ones(4), training=not eval_mode, eps=reference.bn.eps
        )
        assert torch.allclose(run_reference(), expected, atol=1e-5)
        assert run_solution().shape == (16, 4)
