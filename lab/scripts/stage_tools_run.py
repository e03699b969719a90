"""The stage instruments on a two-stage single-launch kernel of our own (lab/scripts/two_stage/),
through the jail as a run's model would call them: the stages tool, then the ncu_kernel tool on
a standalone launch of the kernel. Beside them, the kernel's step timed here too, in this
process: the stages must add up to it within 10% (issue 13). On the CPU the same runs on the
solution's torch stand-in (tests/test_megakernel_probes.py); on CUDA lab/scripts/gpu_megakernel.sh.

    python lab/scripts/stage_tools_run.py stages|ncu OUT_FOLDER [WORK_FOLDER, default /tmp/kagent-stage-tools]

`megakernel` runs the stages tool on kagent's own megakernel (examples/02_kimi_linear_decode/)
for the flagship task at full scale, at every context (on a GPU; at smoke scale on the CPU,
where it takes minutes): stage_tools_megakernel.json in OUT_FOLDER. `megakernel-ncu` runs the
ncu_kernel tool on one launch of it, both views (its probe.py; a GPU with Nsight Compute only).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

from kagent.sandbox.evaluate import EvalOptions
from kagent.sandbox.harness.mega import Task
from kagent.tasks import TaskRef, resolve_task
from kagent.tools import default_tools
from kagent.tools.base import ToolContext

HERE = Path(__file__).resolve().parent / "two_stage"
MEGAKERNEL = Path(__file__).resolve().parents[2] / "examples" / "02_kimi_linear_decode"
TIMED_STEPS = 50
TOOLS = {tool.spec.name: tool for tool in default_tools()}


def own_step_us(device: str) -> dict[str, float]:
    """The solution's step timed in this process: back to back over many steps, as a decode loop
    runs it, and each alone by device events."""
    sys.path.insert(0, str(HERE))
    from problem import get_inputs
    from solution import ModelNew

    model, inputs = ModelNew(), get_inputs()
    for _ in range(3):
        total = model(*inputs)
    expected = inputs[0].sum(dtype=torch.int64) + inputs[1].sum(dtype=torch.int64)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    started = time.perf_counter()
    for _ in range(TIMED_STEPS):
        model(*inputs)
    sync()
    back_to_back = (time.perf_counter() - started) / TIMED_STEPS * 1e6
    alone = []
    if device.startswith("cuda"):
        for _ in range(TIMED_STEPS):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            alone.append(begin.elapsed_time(end) * 1e3)
    return {
        "back_to_back_us": back_to_back,
        "alone_us": statistics.median(alone) if alone else None,
        "correct": bool(int(total.reshape(-1)[0]) == int(expected)),
    }


def _context(root: Path, task: TaskRef, copies: dict[Path, list[str]], scale_on_gpu: str = "smoke") -> ToolContext:
    """A workspace under ``root`` holding the named files of each folder in ``copies``, and the
    tool context for ``task`` on this machine's device (``scale_on_gpu`` where it has CUDA)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    for folder, names in copies.items():
        for name in names:
            shutil.copy(folder / name, workspace / name)
    return ToolContext(
        workspace=workspace,
        task=task,
        eval_options=EvalOptions(
            device=device,
            scale=scale_on_gpu if device == "cuda" else "smoke",
            cache_dir=root / "cache",
            home=root / "home",
        ),
    )


def prepare(root: Path) -> ToolContext:
    """A workspace holding the two-stage solution and its probe, and the problem as the task."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "problem.py", root / "problem.py")
    return _context(root, resolve_task(str(root / "problem.py")), {HERE: ["solution.py", "problem.py", "probe.py"]})


def prepare_megakernel(root: Path) -> ToolContext:
    """A workspace holding kagent's megakernel and its probe, with the flagship task (its files
    in task/, as a run's workspace holds them)."""
    task = resolve_task("02_kimi_linear_decode")
    ctx = _context(
        root, task, {MEGAKERNEL: ["solution.py", "megakernel.py", "bench.py", "probe.py"]}, scale_on_gpu="full"
    )
    shutil.copytree(task.path, ctx.workspace / "task", dirs_exist_ok=True)
    return ctx


def run_megakernel_stages(ctx: ToolContext, out: Path) -> bool:
    """The stages tool on the megakernel at each of the scale's contexts."""
    shapes = Task(ctx.task.path, ctx.eval_options.scale, torch.device(ctx.eval_options.device)).shapes
    report: dict = {"device": ctx.eval_options.device, "scale": ctx.eval_options.scale, "contexts": {}}
    ok = True
    for shape in shapes:
        context_len = int(shape["context_len"])
        started = time.monotonic()
        # The interpreter takes seconds a step: on the CPU a sweep of 2 steps, once, is enough to try it.
        sweep = {"steps": 20, "rounds": 3} if ctx.eval_options.device == "cuda" else {"steps": 2, "rounds": 1}
        stages = TOOLS["stages"].run({"context_len": context_len, **sweep}, ctx)
        seconds = round(time.monotonic() - started, 1)
        report["contexts"][str(context_len)] = {
            "seconds": seconds,
            "is_error": stages.is_error,
            "content": stages.content,
            "data": stages.data,
        }
        print(f"--- stages tool, ctx {context_len} ({seconds} s)\n{stages.content}", flush=True)
        ok = ok and not stages.is_error
    (out / "stage_tools_megakernel.json").write_text(json.dumps(report, indent=1))
    return ok


def run_megakernel_ncu(ctx: ToolContext, out: Path) -> bool:
    """The ncu_kernel tool on one launch of the megakernel (its probe, after two warm-up
    launches): its details, then its source view (where the warps wait, by source line) at the
    shortest context and at the longest (where the attention over the cache takes a fifth of
    the step); NCU_VIEWS=source_16384 (a comma list of those names) runs only those."""
    report, ok = {}, True
    views = (("details", "details", 2048), ("source", "source", 2048), ("source_16384", "source", 16384))
    wanted = os.environ.get("NCU_VIEWS", ",".join(name for name, _, _ in views)).split(",")
    unknown = set(wanted) - {name for name, _, _ in views}
    if unknown:
        raise SystemExit(f"NCU_VIEWS: unknown {sorted(unknown)}; some of {', '.join(name for name, _, _ in views)}")
    for name, view, context in (v for v in views if v[0] in wanted):
        started = time.monotonic()
        ncu = TOOLS["ncu_kernel"].run(
            {
                "path": "probe.py",
                "kernel": "kimi_decode_step",
                "launch_skip": 2,
                "view": view,
                "arguments": ["--context", str(context)],
            },
            ctx,
        )
        report[name] = {
            "seconds": round(time.monotonic() - started, 1),
            "is_error": ncu.is_error,
            "content": ncu.content,
            "data": ncu.data,
        }
        print(
            f"--- ncu_kernel tool on the megakernel, view {view}, ctx {context} ({report[name]['seconds']} s)\n"
            f"{ncu.content[:12000]}",
            flush=True,
        )
        ok = ok and not ncu.is_error
    for csv_file in (ctx.workspace / "build").glob("*.csv"):
        shutil.copy(csv_file, out / f"megakernel_{csv_file.name}")
    (out / "ncu_megakernel.json").write_text(json.dumps(report, indent=1))
    return ok


def run_stages(ctx: ToolContext, out: Path) -> bool:
    """The stages tool, and the step timed here: the stages must add up to it within 10%."""
    report: dict = {"device": ctx.eval_options.device}
    started = time.monotonic()
    stages = TOOLS["stages"].run({"steps": 20, "rounds": 3}, ctx)
    report["stages"] = {
        "seconds": round(time.monotonic() - started, 1),
        "is_error": stages.is_error,
        "content": stages.content,
        "data": stages.data,
    }
    print(f"--- stages tool ({report['stages']['seconds']} s)\n{stages.content}")
    report["own_step"] = own_step_us(ctx.eval_options.device)
    if not stages.is_error:
        total = sum(r["us"] for r in stages.data["stages"])
        base = float(stages.content.split("launch and barriers alone | ")[1].split(" |")[0])
        step = report["own_step"]["back_to_back_us"]
        report["agreement"] = {"stages_us": total, "base_us": base, "step_us": step, "ratio": (total + base) / step}
        print(
            f"stages {total:.1f} µs + launch and barriers alone {base:.1f} µs = {total + base:.1f} µs against the "
            f"step timed here back to back, {step:.1f} µs ({(total + base) / step:.1%}); each alone by events: "
            f"{report['own_step']['alone_us']} µs; the sum is right: {report['own_step']['correct']}"
        )
    (out / "stage_tools.json").write_text(json.dumps(report, indent=1))
    return not stages.is_error


def run_ncu(ctx: ToolContext, out: Path) -> bool:
    """The ncu_kernel tool on a standalone launch of the kernel; its CSV kept for the tests."""
    started = time.monotonic()
    ncu = TOOLS["ncu_kernel"].run({"path": "probe.py", "kernel": "_two_stages", "launch_skip": 1}, ctx)
    report = {"seconds": round(time.monotonic() - started, 1), "is_error": ncu.is_error, "content": ncu.content}
    print(f"--- ncu_kernel tool ({report['seconds']} s)\n{ncu.content[:6000]}")
    csv_file = ctx.workspace / "build" / "ncu_probe.csv"
    if csv_file.exists():
        shutil.copy(csv_file, out / "ncu_probe.csv")
    (out / "ncu_tool.json").write_text(json.dumps(report, indent=1))
    return not ncu.is_error


PARTS = ("stages", "ncu", "megakernel", "megakernel-ncu")


def main(part: str, out: Path, root: Path) -> int:
    if part not in PARTS:
        raise SystemExit(f"unknown part {part!r}: one of {', '.join(PARTS)}")
    if part in ("megakernel", "megakernel-ncu"):
        run = run_megakernel_stages if part == "megakernel" else run_megakernel_ncu
        return 0 if run(prepare_megakernel(root), out) else 1
    ctx = prepare(root)
    return 0 if (run_stages if part == "stages" else run_ncu)(ctx, out) else 1


if __name__ == "__main__":
    sys.exit(
        main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/kagent-stage-tools"))
    )
