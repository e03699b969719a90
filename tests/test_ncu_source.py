"""Where a kernel's warps wait, by source line (the ncu_kernel tool's source view), on the CPU: a
real Triton kernel compiled for sm_90 into a build home's Triton cache, its real line table
(nvdisasm -g), and a source page in Nsight Compute's CSV layout made from its instructions
with known samples. The GPU run of the tool is in lab/scripts/stage_tools_run.py (megakernel-ncu)."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kagent.sandbox.evaluate import EvalOptions
from kagent.tools import default_tools
from kagent.tools.base import ToolContext, scrubbed_env
from kagent.tools.kernel_reports import find_cuda_tool
from kagent.tools.ncu_source import (
    NOT_ISSUED,
    PTX_SECTION,
    SAMPLES,
    _in_triton,
    attach_chains,
    best_match,
    by_line_text,
    call_chains,
    callers_of,
    elf_section,
    lines_of,
    opcode,
    parse_disassembly,
    parse_source_page,
)

from conftest import install_fake_ncu

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

TOOLS = {tool.spec.name: tool for tool in default_tools()}
HOT = "return x * 2.0 + y  # the hot line"


@triton.jit
def _scaled(x, y):
    return x * 2.0 + y  # the hot line


@triton.jit
def sampled_kernel(x_ptr, y_ptr, out_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    y = tl.load(y_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, _scaled(x, y), mask=inside)  # the call
    tl.atomic_add(sum_ptr, tl.sum(x, axis=0))  # a reduction of Triton's library


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.strip() == text)


HOT_LINE = _line_of(HOT)
CALL_LINE = _line_of("tl.store(out_ptr + offsets, _scaled(x, y), mask=inside)  # the call")
SUM_LINE = _line_of("tl.atomic_add(sum_ptr, tl.sum(x, axis=0))  # a reduction of Triton's library")


def compile_into(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel compiled for sm_90 into the Triton cache ``cache``, as a run's build home
    holds it after the kernel's first launch; its cubin."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    triton.compile(
        ASTSource(
            fn=sampled_kernel,
            signature={
                "x_ptr": "*fp32",
                "y_ptr": "*fp32",
                "out_ptr": "*fp32",
                "sum_ptr": "*fp32",
                "n": "i32",
                "BLOCK": "constexpr",
            },
            constexprs={"BLOCK": 1024},
        ),
        target=GPUTarget("cuda", 90, 32),
    )
    monkeypatch.delenv("TRITON_CACHE_DIR")
    (cubin,) = cache.glob("*/sampled_kernel.cubin")
    return cubin


def disassembled(cubin: Path) -> str:
    nvdisasm = find_cuda_tool("nvdisasm", None)
    assert nvdisasm, "Triton ships nvdisasm: the test extra installs it"
    return subprocess.run([nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout


def source_page(instructions, samples_of, base: int = 0x7F3A5C001200, address=lambda a: f"0x{a:x}") -> str:
    """Nsight Compute's SASS source page as CSV, one row per instruction (with a column per
    stall reason, as some versions print), between ncu's own lines."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerow(
        ["Address", "Source", "Instructions Executed", SAMPLES, NOT_ISSUED, "stall_barrier", "stall_long_sb"]
    )
    for i in instructions:
        samples = samples_of(i)
        writer.writerow(
            [
                address(base + i.offset),
                i.text,
                "1,024",
                f"{samples:,}",
                samples // 2,
                samples // 4,
                samples - samples // 4,
            ]
        )
    return "==PROF== Connected to process 77\n" + out.getvalue() + "==PROF== Disconnected from process 77\n"


@pytest.fixture
def compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cubin = compile_into(tmp_path / "cache", monkeypatch)
    return cubin, disassembled(cubin)


def test_the_line_table_of_a_triton_cubin(compiled):
    cubin, listing = compiled
    (instructions,) = parse_disassembly(listing).values()
    assert list(parse_disassembly(listing)) == ["sampled_kernel"]
    offsets = [i.offset for i in instructions]
    assert offsets == sorted(offsets) and offsets[0] == 0 and len(set(offsets)) == len(offsets)
    # Every instruction has its line in this file or in Triton's library (tl.sum's); the hot
    # line is among them (inlined from _scaled).
    lines = {i.line for i in instructions if i.file == __file__}
    assert all(i.file == __file__ or _in_triton(i.file) for i in instructions if i.file) and HOT_LINE in lines
    assert opcode("@!P0 LDG.E.128 R4, desc[UR4][R2.64]") == "LDG" and opcode("EXIT") == "EXIT"


def test_samples_by_source_line_through_the_binary_that_ran(compiled):
    cubin, listing = compiled
    (instructions,) = parse_disassembly(listing).values()
    page = source_page(instructions, lambda i: 100 if i.line == HOT_LINE else 1)
    (rows,) = parse_source_page(page)
    assert len(rows) == len(instructions) and max(r.samples for r in rows) == 100
    assert next(r for r in rows if r.samples == 100).reasons == {"barrier": 25, "long_sb": 75}
    match = best_match(rows, [(cubin, listing)])
    assert match is not None and match.function == "sampled_kernel" and match.agreement == 1.0
    text = by_line_text(rows, match, "build/ncu_source_probe.csv", readable=[Path(__file__).parent]).splitlines()
    hot = [i for i in instructions if i.line == HOT_LINE]
    total = 100 * len(hot) + len(instructions) - len(hot)
    assert (
        text[0] == f"Warp-state samples: {total:,} over {len(instructions)} SASS instructions (the whole page "
        f"is in build/ncu_source_probe.csv)."
    )
    assert text[2] == "share  samples  not issued  instrs  line"
    # The hot line first, with its share, its not-issued share, its instructions, its text and
    # its reasons.
    assert text[3].split()[:4] == [
        f"{100 * 100 * len(hot) / total:.1f}%",
        f"{100 * len(hot):,}",
        "50.0%",
        str(len(hot)),
    ]
    assert f"test_ncu_source.py:{HOT_LINE}  {HOT}  [long_sb 75%, barrier 25%]" in text[3]
    assert "SASS instructions with the most samples (offset from the kernel's first):" in text
    assert any(
        line.endswith(f"test_ncu_source.py:{HOT_LINE}")
        for line in text[text.index("SASS instructions with the most samples (offset from the kernel's first):") + 1 :]
    )


def test_inlined_code_counts_at_the_kernel_s_own_lines(compiled):
    # The line table alone puts tl.sum's instructions in Triton's library and _scaled's at its
    # own line; through the PTX Triton kept beside the cubin, the first count at the line that
    # called tl.sum, and the second are also listed by the kernel line that called _scaled.
    cubin, listing = compiled
    (instructions,) = parse_disassembly(listing).values()
    assert any(i.file and _in_triton(i.file) for i in instructions)
    embedded = elf_section(cubin.read_bytes(), PTX_SECTION)
    assert embedded is not None
    chains = call_chains(embedded, cubin.with_suffix(".ptx").read_text())
    ptx_listing = subprocess.run(
        [find_cuda_tool("nvdisasm", None), "-gp", "-c", str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    page = source_page(instructions, lambda i: 1)
    (rows,) = parse_source_page(page)
    match = best_match(rows, [(cubin, listing)])
    assert attach_chains(match, ptx_listing, chains) > len(instructions) // 2
    summed = [i for i in match.instructions if i.file and _in_triton(i.file)]
    assert summed and all(i.chain[-1] == (__file__, SUM_LINE) for i in summed if i.chain)
    where = lines_of(rows, match)
    assert not any(file and _in_triton(file) for file, _ in where.values())
    assert (__file__, SUM_LINE) in where.values() and (__file__, HOT_LINE) in where.values()
    callers = callers_of(rows, match)
    assert set(callers.values()) == {(__file__, CALL_LINE), (__file__, SUM_LINE)}
    text = by_line_text(rows, match, "x.csv", readable=[Path(__file__).parent])
    assert "By the line of the kernel's body each helper's work was called from" in text
    assert f"test_ncu_source.py:{CALL_LINE}  tl.store(out_ptr + offsets, _scaled(x, y), mask=inside)" in text
    assert elf_section(b"not an ELF file", PTX_SECTION) is None
    assert elf_section(cubin.read_bytes()[:100], PTX_SECTION) is None  # cut short: no section, no crash


def test_pages_in_other_versions_layouts_are_mapped(compiled):
    cubin, listing = compiled
    (instructions,) = parse_disassembly(listing).values()
    # A version that leaves out the NOPs after the kernel's end; one that prints addresses in
    # decimal.
    body = instructions[: max(i for i, ins in enumerate(instructions) if opcode(ins.text) != "NOP") + 1]
    assert len(body) < len(instructions)
    (rows,) = parse_source_page(source_page(body, lambda i: 1))
    assert best_match(rows, [(cubin, listing)]).agreement == 1.0
    (rows,) = parse_source_page(source_page(instructions, lambda i: 1, address=str))
    assert rows[0].address == 0x7F3A5C001200 and best_match(rows, [(cubin, listing)]).agreement == 1.0
    # A version that heads the column "# Address".
    (rows,) = parse_source_page(source_page(instructions, lambda i: 1).replace('"Address"', '"# Address"'))
    assert len(rows) == len(instructions) and best_match(rows, [(cubin, listing)]).agreement == 1.0


def test_a_page_of_other_code_is_not_mapped(compiled):
    cubin, listing = compiled
    (instructions,) = parse_disassembly(listing).values()
    # The same addresses, but each holding the instruction after it: another kernel's page.
    shifted = [
        type(i)(i.offset, instructions[(k + 1) % len(instructions)].text, None, None)
        for k, i in enumerate(instructions)
    ]
    (rows,) = parse_source_page(source_page(shifted, lambda i: 3))
    assert best_match(rows, [(cubin, listing)]) is None
    text = by_line_text(rows, None, "x.csv", "no device binary found")
    assert "Not mapped to source lines: no device binary found" in text and "share  samples" not in text
    (empty,) = parse_source_page(source_page(instructions, lambda i: 0))
    assert "No samples" in by_line_text(empty, None, "x.csv")


def test_the_tool_s_source_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kimi, kagent_home: Path):
    workspace = tmp_path / "ws"
    (workspace / "task").mkdir(parents=True)
    ctx = ToolContext(
        workspace=workspace, task=kimi, eval_options=EvalOptions(device="cuda", scale="smoke", cache_dir=kagent_home)
    )
    (workspace / "probe.py").write_text("print('launching')\n")
    # The kernel as its first launch left it in the run's build home, and the page of its launch
    # (beside a dangling link that looks like a cubin, and one that looks like a library).
    cubin = compile_into(ctx.home / ".triton" / "cache", monkeypatch)
    (cubin.parent / "dangling.cubin").symlink_to(tmp_path / "nowhere")
    (workspace / "dangling.so").symlink_to(tmp_path / "nowhere")
    (instructions,) = parse_disassembly(disassembled(cubin)).values()
    argv_file = workspace / "ncu_argv.txt"
    install_fake_ncu(workspace / "bin", source_page(instructions, lambda i: 40 if i.line == HOT_LINE else 2), argv_file)
    ctx.env = {**scrubbed_env(), "PATH": f"{workspace / 'bin'}:/usr/bin:/bin"}
    out = TOOLS["ncu_kernel"].run({"path": "probe.py", "kernel": "sampled", "view": "source"}, ctx)
    assert not out.is_error, out.content
    argv = argv_file.read_text().split()
    assert argv[:10] == [
        "--section",
        "SourceCounters",
        "--section",
        "WarpStateStats",
        "--csv",
        "--page",
        "source",
        "--print-source",
        "sass",
        "--clock-control",
    ]
    assert f"nvdisasm -g of ~/.triton/cache/{cubin.parent.name}/sampled_kernel.cubin" in out.content
    # The kernel's file (this one) is outside the workspace: its line is named, its text not
    # shown (a line table can name any file; the model's commands cannot read this one). The
    # .cu test below shows a workspace file's text.
    assert f"test_ncu_source.py:{HOT_LINE}  " in out.content and HOT not in out.content
    assert out.data["function"] == "sampled_kernel" and out.data["agreement"] == 1.0
    assert (workspace / "build" / "ncu_source_probe.csv").read_text().count("\n") > len(instructions)
    assert f"test_ncu_source.py:{CALL_LINE}  " in out.content.split("each helper's work was called from")[1]
    # The PTX beside the cubin is read outside the jail: a link the model's code planted there,
    # to a file its commands cannot read, is not followed.
    # (Here the file outside is the kernel's own PTX with its lines renamed, so that following
    # the link would show.)
    ptx = cubin.with_suffix(".ptx")
    secret = tmp_path / "secret.txt"
    secret.write_text(re.sub(r"//.*", "// secret.txt:4242:1", ptx.read_text()))
    ptx.unlink()
    ptx.symlink_to(secret)
    out = TOOLS["ncu_kernel"].run({"path": "probe.py", "view": "source"}, ctx)
    assert not out.is_error and out.data["function"] == "sampled_kernel"
    assert "secret" not in out.content and "4242" not in out.content and "called from" not in out.content
    # Without the binary: the samples by instruction, and why there are no lines.
    cubin.unlink()
    out = TOOLS["ncu_kernel"].run({"path": "probe.py", "view": "source"}, ctx)
    assert not out.is_error and "Not mapped to source lines: no device binary found" in out.content
    assert out.data["binary"] is None
    for bad, message in (
        ({"path": "probe.py", "view": "lines"}, "view must be one of details, source"),
        ({"path": "probe.py", "view": "source", "kernel": "(unclosed"}, "not a regular expression"),
    ):
        refused = TOOLS["ncu_kernel"].run(bad, ctx)
        assert refused.is_error and message in refused.content, refused.content


SAXPY = """__global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() { return 0; }
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_source_view_of_a_cu_program(tmp_path: Path, kimi, kagent_home: Path):
    workspace = tmp_path / "ws"
    (workspace / "task").mkdir(parents=True)
    ctx = ToolContext(
        workspace=workspace, task=kimi, eval_options=EvalOptions(device="cuda", scale="smoke", cache_dir=kagent_home)
    )
    program = workspace / "saxpy.cu"
    program.write_text(SAXPY)
    # The device code the tool's build makes (the same nvcc flags, as a cubin), for the page.
    cubin = tmp_path / "saxpy.cubin"
    subprocess.run(["nvcc", "-O3", "-arch=sm_90a", "-lineinfo", "-cubin", "-o", str(cubin), str(program)], check=True)
    (instructions,) = parse_disassembly(disassembled(cubin)).values()
    install_fake_ncu(
        workspace / "bin", source_page(instructions, lambda i: 9 if i.line == 3 else 1), workspace / "argv.txt"
    )
    ctx.env = {**scrubbed_env(), "PATH": f"{workspace / 'bin'}:{os.environ['PATH']}"}
    out = TOOLS["ncu_kernel"].run({"path": "saxpy.cu", "view": "source"}, ctx)
    assert not out.is_error, out.content
    assert out.data["function"] == "_Z5saxpyfPKfPfi" and out.data["agreement"] == 1.0
    assert "saxpy.cu:3  if (i < n) y[i] = a * x[i] + y[i];" in out.content.splitlines()[3]
