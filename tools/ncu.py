"""Nsight Compute with a whole section set on a standalone kernel file: the `ncu_kernel` tool.

The profile tool measures the solution as the harness builds it, a few metrics per kernel. A
megakernel is better read on its own: a small script (or a .cu program) that builds it and
launches it on realistic data, profiled with every section of a set (``full`` by default:
speed of light, memory workload, compute workload, launch statistics, occupancy, scheduler
and warp state statistics, source counters), clocks left as they are. The whole report is
saved as CSV in the workspace; the model reads the key sections' metrics, then Nsight
Compute's own advice (its rules). Its source view (ncu_source.py) says where in the source the
warps wait: the warp-state samples of each SASS instruction, joined to source lines through the
line table of the binary that ran.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from kagent.tools import ncu_source
from kagent.tools.base import (
    Args,
    BaseTool,
    Completed,
    ToolContext,
    ToolError,
    ToolFacts,
    ToolOutcome,
    relative_name,
    resolve_in_workspace,
    run_command,
)
from kagent.tools.kernel_reports import find_cuda_tool

NCU_TIMEOUT_S = 900.0
NVCC_TIMEOUT_S = 300.0
DISASSEMBLY_TIMEOUT_S = 120.0
SECTION_SETS = ("full", "detailed", "basic", "roofline")
VIEWS = ("details", "source")
# The source view's pass: the sections whose samples fill the source page, nothing else.
SOURCE_SECTIONS = ("SourceCounters", "WarpStateStats")
# Binaries disassembled at most in search of the one that ran (each costs a contained
# nvdisasm), and libraries opened for their device code.
MAX_CUBINS = 48
MAX_LIBRARIES = 16
MAX_PTX_BYTES = 64 << 20
# Shown in full unless the model picks sections itself, in this order (what limits the kernel
# first: the tool's output is capped, so what comes last may be cut); the others by name and
# metric count.
KEY_SECTIONS = (
    "GPU Speed Of Light Throughput",
    "Warp State Statistics",
    "Scheduler Statistics",
    "Memory Workload Analysis",
    "Occupancy",
    "Launch Statistics",
)
MAX_RULE_CHARS = 400
# A metric's value longer than this is a chart's series (Nsight Compute prints some occupancy
# and instruction metrics as a total and then every point in parentheses, up to 2 KB each).
MAX_VALUE_CHARS = 120


def parse_ncu_details(output: str) -> list[dict[str, Any]]:
    """``ncu --csv --page details`` output as launches in order: each with its kernel name,
    grid and block, its sections (name -> [(metric, value, unit)]) and its rules (type,
    name, description), whichever of those columns the version of ncu prints. Read as one
    CSV from its header on (a field may hold a line break); the tool's own ``==PROF==`` lines
    before and after are no rows."""
    start = output.find('"ID",')
    if start < 0:
        return []
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO(output[start:])):
        launch_id = row.get("ID")
        if launch_id is None or not row.get("Kernel Name"):
            continue
        launch = launches.setdefault(
            launch_id,
            {
                "id": launch_id,
                "kernel": row["Kernel Name"],
                "grid": row.get("Grid Size", ""),
                "block": row.get("Block Size", ""),
                "sections": {},
                "rules": [],
            },
        )
        section = row.get("Section Name") or "(no section)"
        rule = (row.get("Rule Name") or "").strip()
        if rule:
            description = " ".join((row.get("Rule Description") or "").split())
            entry = {
                "type": (row.get("Rule Type") or "").strip(),
                "name": rule,
                "section": section,
                "description": description,
                "speedup": (row.get("Estimated Speedup") or "").strip(),
            }
            if entry not in launch["rules"]:
                launch["rules"].append(entry)
        metric = (row.get("Metric Name") or "").strip()
        if metric:
            launch["sections"].setdefault(section, []).append(
                (metric, (row.get("Metric Value") or "").strip(), (row.get("Metric Unit") or "").strip())
            )
    return list(launches.values())


def shown_value(value: str) -> str:
    """A metric's value as the model reads it: a chart's series cut to its total."""
    if len(value) <= MAX_VALUE_CHARS:
        return value
    total, opened, series = value.partition(" (")
    if opened and series.endswith(")"):
        return f"{total} (a series of {series.count(';') + 1} values: in the CSV)"
    return value[:MAX_VALUE_CHARS] + "…"


def _is_zero(value: str) -> bool:
    try:
        return float(value.replace(",", "")) == 0.0
    except ValueError:
        return False


def details_text(launches: list[dict[str, Any]], sections: Optional[str], saved_as: str) -> str:
    """What the model reads: per launch its sections' metrics (all of those ``sections``
    matches, a regex; by default the key ones, in KEY_SECTIONS' order, less the metrics that
    read zero, and the others by name), then Nsight Compute's advice (its rules). Metrics come
    first because they are the facts and they are short: a tool's output is capped in its
    middle, and a megakernel's report runs to 12 KB. Charts' series are cut to their totals."""
    pick = re.compile(sections, re.IGNORECASE) if sections else None
    lines = [f"Nsight Compute, {len(launches)} launch(es); the whole report is in {saved_as}"]
    for launch in launches:
        lines.append(f"\n== {launch['kernel'][:160]} (ID {launch['id']}) grid {launch['grid']} block {launch['block']}")
        found = launch["sections"]
        order = [name for name in KEY_SECTIONS if name in found] + [n for n in found if n not in KEY_SECTIONS]
        others = []
        for name in order:
            metrics = found[name]
            if not (pick.search(name) if pick else name in KEY_SECTIONS):
                others.append(f"{name} ({len(metrics)})")
                continue
            # The model named these sections: every metric; else the zeros (a breakdown's idle
            # pipes and units) are counted, not listed.
            listed = metrics if pick else [m for m in metrics if not _is_zero(m[1])]
            lines.append(
                f"-- {name}"
                + (f" ({len(metrics) - len(listed)} metrics at zero not shown)" if len(listed) < len(metrics) else "")
            )
            lines += [f"   {metric}: {shown_value(value)} {unit}".rstrip() for metric, value, unit in listed]
        if others:
            lines.append("other sections (metrics; ask for them with sections=...): " + ", ".join(others))
        for rule in launch["rules"]:
            if rule["type"] in ("OPT", "WRN", "ERROR") or not rule["type"]:
                speedup = f" (estimated speedup {rule['speedup']}%)" if rule["speedup"] else ""
                lines.append(
                    f"[{rule['type'] or 'rule'}] {rule['name']}{speedup}: {rule['description'][:MAX_RULE_CHARS]}"
                )
    return "\n".join(lines)


def _shown(folder: Path, ctx: ToolContext, tmp: Path) -> list[Path]:
    """``folder`` as a command's ``show``, where it lies outside the folders the command may
    write (the scratch, the workspace, the build home): shown, a folder is brought back
    read-only, also over a writable one around it, and the command could not write there."""
    inside = any(folder.resolve().is_relative_to(root.resolve()) for root in (tmp, ctx.workspace, ctx.home))
    return [] if inside else [folder]


class NcuKernelArgs(Args):
    path: str = Field(
        description="A standalone .py script (run with the evaluating python) or .cu program (built "
        "with nvcc first) that launches the kernel to profile"
    )
    arguments: list[str] = Field(default_factory=list, description="Command-line arguments for it")
    kernel: Optional[str] = Field(None, description="Profile only kernels whose name matches this regex")
    launch_skip: int = Field(0, ge=0, description="Matching launches to skip first (e.g. warm-ups)")
    launch_count: int = Field(1, ge=1, le=10, description="Matching launches to profile")
    section_set: str = Field("full", description="Nsight Compute section set: " + ", ".join(SECTION_SETS))
    sections: Optional[str] = Field(
        None, description="Show these sections' metrics in full (a regex on their names); by default the key ones"
    )
    arch: str = Field("sm_90a", pattern=r"^(sm|compute)_\d+[a-z]?$", description="nvcc architecture for a .cu")
    view: str = Field(
        "details",
        description="details: the section set's metrics and Nsight Compute's advice; "
        "source: where the warps wait, the warp-state samples by source line "
        "and by SASS instruction (a lighter pass of its own; Triton kernels, "
        ".cu files and load_inline libraries)",
    )


class NcuKernel(BaseTool):
    name = "ncu_kernel"
    description = (
        "Profile a standalone kernel file under Nsight Compute with a whole section set (full by "
        "default): a .py script or a .cu program that launches the kernel. Returns Nsight Compute's "
        "advice and the key sections' metrics (throughput, memory, occupancy, warp stalls); saves the "
        "whole report as CSV in build/. view=source says instead where the warps wait: stall samples "
        "by source line. CUDA with ncu installed only."
    )
    Arguments = NcuKernelArgs
    # It runs the kernel's file, in the workspace, and saves the report in build/.
    facts = ToolFacts(changes_files=True)

    def execute(self, args: NcuKernelArgs, ctx: ToolContext) -> ToolOutcome:
        if args.section_set not in SECTION_SETS:
            raise ToolError(f"section_set must be one of {', '.join(SECTION_SETS)}, not {args.section_set!r}")
        if args.view not in VIEWS:
            raise ToolError(f"view must be one of {', '.join(VIEWS)}, not {args.view!r}")
        try:
            re.compile(args.kernel or "")
        except re.error as err:
            raise ToolError(f"kernel {args.kernel!r} is not a regular expression: {err}") from None
        path = resolve_in_workspace(ctx, args.path)
        shown = relative_name(ctx, path)
        if not path.is_file() or path.suffix not in (".py", ".cu"):
            raise ToolError(
                f"{shown} is not a .py or .cu file of the workspace" if path.exists() else f"no file {shown}"
            )
        tool_path = ctx.command_env().get("PATH")
        ncu = shutil.which("ncu", path=tool_path)
        if ncu is None:
            raise ToolError("Nsight Compute is not installed here (ncu not on PATH): no hardware counters")
        if not ctx.eval_options.device.startswith("cuda"):
            raise ToolError(f"Nsight Compute needs a CUDA device; this run evaluates on {ctx.eval_options.device}")
        with tempfile.TemporaryDirectory(prefix="kagent-ncu-") as tmp:
            target = self._target(ctx, path, args, Path(tmp), tool_path)
            # The report goes to a file: on stdout it would be capped like any command's output,
            # and a full set runs to hundreds of rows a launch.
            report = Path(tmp) / "report.csv"
            page = (
                ["--set", args.section_set, "--csv", "--page", "details", "--print-details", "all"]
                if args.view == "details"
                else [
                    *(arg for section in SOURCE_SECTIONS for arg in ("--section", section)),
                    "--csv",
                    "--page",
                    "source",
                    "--print-source",
                    "sass",
                ]
            )
            argv = [
                ncu,
                *page,
                "--clock-control",
                "none",
                "--launch-skip",
                str(args.launch_skip),
                "--launch-count",
                str(args.launch_count),
                "--log-file",
                str(report),
            ]
            if args.kernel:
                argv += ["--kernel-name", f"regex:{args.kernel}"]
            done = run_command(
                [*argv, *target, *args.arguments], ctx, NCU_TIMEOUT_S, cwd=path.parent, writable=[Path(tmp)]
            )
            text = report.read_text(errors="replace") if report.exists() else ""
            if args.view == "source":
                return self._source_view(ctx, path, args, text, done, Path(tmp), target)
        launches = parse_ncu_details(text)
        if not launches:
            raise self._nothing_profiled(done, text)
        saved_as = self._save(ctx, f"ncu_{path.stem}.csv", text[text.find('"ID",') :])
        return ToolOutcome(
            content=details_text(launches, args.sections, saved_as),
            data={
                "saved_as": saved_as,
                "launches": [{k: launch[k] for k in ("id", "kernel", "grid", "block", "rules")} for launch in launches],
            },
        )

    @staticmethod
    def _nothing_profiled(done: Completed, text: str) -> ToolError:
        why = "timed out" if done.timed_out else f"exit code {done.exit_code}"
        return ToolError(
            f"Nsight Compute profiled no kernel ({why}; check kernel, launch_skip and that the file "
            f"launches something):\n{done.output[-3000:]}\n{text[-2000:]}".rstrip()
        )

    @staticmethod
    def _save(ctx: ToolContext, name: str, text: str) -> str:
        """Keep ``text`` as build/``name`` in the workspace; its name as the model reads it."""
        saved = resolve_in_workspace(ctx, f"build/{name}", for_writing=True)
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(text)
        return relative_name(ctx, saved)

    def _source_view(
        self,
        ctx: ToolContext,
        path: Path,
        args: NcuKernelArgs,
        text: str,
        done: Completed,
        tmp: Path,
        target: list[str],
    ) -> ToolOutcome:
        """The samples of the source page by source line, through the binary that ran."""
        blocks = ncu_source.parse_source_page(text)
        if not blocks:
            raise self._nothing_profiled(done, text)
        rows = blocks[0]
        saved_as = self._save(ctx, f"ncu_source_{path.stem}.csv", text)
        match, why = None, ""
        nvdisasm = find_cuda_tool("nvdisasm", ctx.command_env().get("PATH"))
        if nvdisasm is None:
            why = "nvdisasm not found (on PATH, in the CUDA toolkit, or the copy Triton ships)"
        else:
            cubins = self._candidate_cubins(ctx, path, args, tmp, target)
            match = ncu_source.best_match(rows, self._listings(ctx, nvdisasm, cubins, tmp))
            if match is not None:
                self._inlined_from(ctx, nvdisasm, match, tmp)
            searched = (
                "the program built"
                if path.suffix == ".cu"
                else "Triton's cache in the build home, the libraries of the build home and of the workspace"
            )
            if match is None:
                why = (
                    f"none of the {len(cubins)} device binaries searched ({searched}) holds this kernel's instructions"
                    if cubins
                    else f"no device binary found ({searched})"
                )

        def shown(binary: Path) -> str:
            for root, prefix in ((ctx.workspace.resolve(), ""), (ctx.home.resolve(), "~/"), (tmp.resolve(), "")):
                if binary.resolve().is_relative_to(root):
                    return prefix + str(binary.resolve().relative_to(root))
            return str(binary)

        content = ncu_source.by_line_text(rows, match, saved_as, why, shown, readable=[ctx.workspace])
        if len(blocks) > 1:
            content = f"{len(blocks)} launches profiled; the first is shown, all are in the CSV.\n" + content
        return ToolOutcome(
            content=content,
            data={
                "saved_as": saved_as,
                "launches": len(blocks),
                "instructions": len(rows),
                "samples": sum(r.samples for r in rows),
                "binary": shown(match.binary) if match else None,
                "function": match.function if match else None,
                "agreement": match.agreement if match else None,
                "not_mapped": why or None,
            },
        )

    @staticmethod
    def _candidate_cubins(
        ctx: ToolContext, path: Path, args: NcuKernelArgs, tmp: Path, target: list[str]
    ) -> list[Path]:
        """Device binaries that may hold the profiled kernel, the likeliest first: for a .cu,
        the program built; for a script, Triton's cubins (those named like ``kernel`` first,
        then the newest) and the device code of the libraries in the build home and the
        workspace (load_inline's), extracted with cuobjdump."""
        libraries: list[Path] = [Path(target[0])] if path.suffix == ".cu" else []
        cubins: list[Path] = []
        if path.suffix == ".py":
            caches = [ctx.home / ".triton" / "cache"]
            if ctx.command_env().get("TRITON_CACHE_DIR"):
                caches.append(Path(ctx.command_env()["TRITON_CACHE_DIR"]))
            named = re.compile(args.kernel) if args.kernel else None
            # (is_file: a dangling link the model's code left in the cache is no candidate)
            found = {c for cache in caches if cache.is_dir() for c in cache.glob("*/*.cubin") if c.is_file()}
            cubins = sorted(found, key=lambda c: (not (named and named.search(c.stem)), -c.stat().st_mtime))
            cubins = cubins[:MAX_CUBINS]
            shared = [
                lib
                for root in (ctx.home / ".cache" / "torch_extensions", ctx.workspace)
                for lib in root.glob("**/*.so")
                if ".git" not in lib.parts and lib.is_file()
            ]
            libraries += sorted(shared, key=lambda lib: -lib.stat().st_mtime)[:MAX_LIBRARIES]
        cuobjdump = find_cuda_tool("cuobjdump", ctx.command_env().get("PATH"))
        if cuobjdump is None:  # the libraries' device code cannot be read: Triton's cubins only
            return cubins
        for i, library in enumerate(libraries):
            into = tmp / f"device_code_{i}"
            into.mkdir()
            run_command(
                [cuobjdump, "-xelf", "all", str(library)],
                ctx,
                DISASSEMBLY_TIMEOUT_S,
                cwd=into,
                show=_shown(library.parent, ctx, tmp),
                writable=[tmp],
            )
            cubins += sorted(into.glob("*.cubin"))
        return cubins[:MAX_CUBINS]

    @staticmethod
    def _inlined_from(ctx: ToolContext, nvdisasm: str, match: ncu_source.Match, tmp: Path) -> None:
        """Where Triton kept the kernel's PTX beside its cubin: each instruction's chain of the
        lines it was inlined from (ncu_source.call_chains), so that a helper's or tl.sum's
        samples count at the kernel's own lines."""
        ptx = match.binary.with_suffix(".ptx")
        # Read here, outside the jail: only what lies in the build home or the workspace, and
        # of a PTX's size (a link the model's code planted could point anywhere).
        roots = [root.resolve() for root in (ctx.home, ctx.workspace)]
        if (
            not ptx.is_file()
            or ptx.stat().st_size > MAX_PTX_BYTES
            or not all(any(f.resolve().is_relative_to(root) for root in roots) for f in (ptx, match.binary))
        ):
            return
        listing = tmp / "listing_ptx_lines.txt"
        done = run_command(
            [nvdisasm, "-gp", "-c", str(match.binary)],
            ctx,
            DISASSEMBLY_TIMEOUT_S,
            cwd=tmp,
            show=_shown(match.binary.parent, ctx, tmp),
            writable=[tmp],
            stdout_to=listing,
        )
        if done.exit_code == 0:
            ncu_source.inline_chains(
                match, match.binary.read_bytes(), ptx.read_text(errors="replace"), listing.read_text(errors="replace")
            )

    @staticmethod
    def _listings(ctx: ToolContext, nvdisasm: str, cubins: list[Path], tmp: Path) -> Iterator[tuple[Path, str]]:
        """(cubin, its nvdisasm -g listing), one at a time: the search stops at the one that ran."""
        for i, cubin in enumerate(cubins):
            listing = tmp / f"listing_{i}.txt"
            disassembled = run_command(
                [nvdisasm, "-g", "-c", str(cubin)],
                ctx,
                DISASSEMBLY_TIMEOUT_S,
                cwd=tmp,
                show=_shown(cubin.parent, ctx, tmp),
                writable=[tmp],
                stdout_to=listing,
            )
            if disassembled.exit_code == 0:
                yield cubin, listing.read_text(errors="replace")

    @staticmethod
    def _target(ctx: ToolContext, path: Path, args: NcuKernelArgs, tmp: Path, tool_path: Optional[str]) -> list[str]:
        """The command ncu runs: the script under the evaluating python, or the .cu built first."""
        if path.suffix == ".py":
            return [ctx.eval_options.python, str(path)]
        nvcc = shutil.which("nvcc", path=tool_path)
        if nvcc is None:
            raise ToolError("nvcc is not installed (not on PATH): a .cu file cannot be built here")
        binary = tmp / path.stem
        built = run_command(
            [nvcc, "-O3", f"-arch={args.arch}", "-lineinfo", "-o", str(binary), str(path)],
            ctx,
            NVCC_TIMEOUT_S,
            cwd=path.parent,
            writable=[tmp],
        )
        if built.exit_code != 0:
            raise ToolError(
                f"nvcc could not build {relative_name(ctx, path)} (exit code {built.exit_code}):\n"
                f"{built.output[-3000:]}"
            )
        return [str(binary)]
