"""The model's tools: success, and every mistake the model can make returned as data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from kagent.sandbox.evaluate import EvalOptions
from kagent.sandbox.instruments.compile import TritonCompiles, triton_kernel_record
from kagent.sandbox.results import Verdict
from kagent.tools import compile as compile_tool, default_tools
from kagent.tools.base import ToolContext, ToolError, cap, resolve_in_workspace, scrubbed_env
from kagent.tools.compile import parse_ptxas
from kagent.tools.evaluation import parse_ncu_csv
from kagent.tools.jobs import Jobs
from kagent.tools.kernel_reports import parse_res_usage, res_usage_table, triton_table

from conftest import processes_with, reference_solution

TOOLS = {tool.spec.name: tool for tool in default_tools()}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

GOOD_CU = """
__global__ void add(float* a, const float* b, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { tile[threadIdx.x] = b[i]; __syncthreads(); a[i] += tile[threadIdx.x]; }
}
"""
BAD_CU = "__global__ void broken(float* a) { a[0] = 1.0f }\n"
# Appended to the reference: a step whose hidden comes back negated (runs fine, wrong answer).
WRONG_STEP = """
_reference_step = Model.step
def _negated_step(self, hidden, state):
    out, state = _reference_step(self, hidden, state)
    return -out, state
Model.step = _negated_step
"""
RAISING_STEP = """
def _raising_step(self, hidden, state):
    raise RuntimeError("kernel exploded on purpose")
Model.step = _raising_step
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "task").mkdir(parents=True)
    (ws / "task" / "reference.py").write_text("REFERENCE = 1\n")
    (ws / ".git").mkdir()
    (ws / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    return ws


@pytest.fixture
def ctx(workspace: Path, kimi, kagent_home: Path) -> ToolContext:
    # Four secret seeds, one of each kind at each check context: no test here counts them, and
    # each of the default 48 costs the referee a reference step or more.
    options = EvalOptions(device="cpu", scale="smoke", rounds=1, cache_dir=kagent_home, hidden_seeds=4)
    return ToolContext(workspace=workspace, task=kimi, eval_options=options)


def call(name: str, ctx: ToolContext, **args):
    return TOOLS[name].run(args, ctx)


# -- base ------------------------------------------------------------------------------------
def test_default_tools_have_schemas():
    assert list(TOOLS) == [
        "read_file",
        "list_files",
        "write_file",
        "edit_file",
        "shell",
        "jobs",
        "compile",
        "baseline",
        "check",
        "benchmark",
        "profile",
        "stages",
        "reference_dump",
        "ncu_kernel",
    ]
    schema = TOOLS["edit_file"].spec.parameters
    assert schema["required"] == ["path", "old", "new"] and schema["additionalProperties"] is False
    assert "title" not in schema["properties"]["old"]


def test_cap_keeps_head_and_tail():
    assert cap("short", 100) == "short"
    text = "HEAD" + "x" * 10_000 + "TAIL"
    capped = cap(text, 500)
    assert len(capped) <= 520
    head, rest = capped.split("\n[… ")
    count, tail = rest.split(" characters omitted …]\n")
    assert head.startswith("HEAD") and tail.endswith("TAIL")
    assert text.startswith(head) and text.endswith(tail) and len(head) + int(count) + len(tail) == len(text)


def test_scrubbed_env_drops_secrets():
    base = {
        "PATH": "/bin",
        "HOME": "/h",
        "CUDA_VISIBLE_DEVICES": "0",
        "TORCH_HOME": "/t",
        "GITHUB_TOKEN": "t",
        "ANTHROPIC_BASE_URL": "u",
        "OPENAI_ORG": "o",
        "my_Password": "p",
        "AWS_SECRET_ACCESS_KEY": "s",
        "GCP_CREDENTIALS": "c",
        "HF_API_KEY": "k",
    }
    assert scrubbed_env(base) == {"PATH": "/bin", "HOME": "/h", "CUDA_VISIBLE_DEVICES": "0", "TORCH_HOME": "/t"}


def test_resolve_rejects_escapes(ctx: ToolContext, workspace: Path, tmp_path: Path):
    assert resolve_in_workspace(ctx, "notes.txt") == (workspace / "notes.txt").resolve()
    assert resolve_in_workspace(ctx, str(workspace / "notes.txt")) == (workspace / "notes.txt").resolve()
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    for bad in ("../outside/x", "/etc/passwd", "link/x", "sub/../../outside"):
        with pytest.raises(ToolError, match="outside the workspace"):
            resolve_in_workspace(ctx, bad)
    (workspace / "loop").symlink_to(workspace / "loop")
    with pytest.raises(ToolError):
        resolve_in_workspace(ctx, "loop/x")
    for read_only in ("task/reference.py", "task/new.py", ".git/config", "./task/../task/x"):
        assert resolve_in_workspace(ctx, read_only)  # reading is fine
        with pytest.raises(ToolError, match="read-only"):
            resolve_in_workspace(ctx, read_only, for_writing=True)


def test_invalid_arguments_are_errors_not_exceptions(ctx: ToolContext):
    missing = call("write_file", ctx, path="a.py")
    assert missing.is_error and "content" in missing.content and "required" in missing.content.lower()
    extra = call("read_file", ctx, path="notes.txt", bogus=1)
    assert extra.is_error and "bogus" in extra.content
    wrong_type = call("shell", ctx, command="true", timeout_s="soon")
    assert wrong_type.is_error and "timeout_s" in wrong_type.content
    assert call("compile", ctx, path="k.cu", arch="sm_90; rm -rf /").is_error


# -- files -----------------------------------------------------------------------------------
def test_read_file_numbers_and_pages(ctx: ToolContext):
    out = call("read_file", ctx, path="notes.txt", offset_line=3, max_lines=2)
    assert not out.is_error
    assert out.content.splitlines()[:2] == [" 3| line 3", " 4| line 4"]
    assert "offset_line=5" in out.content
    assert call("read_file", ctx, path="task/reference.py").content == "1| REFERENCE = 1"
    for bad, why in (("missing.py", "no file"), ("../x", "outside"), ("task", "is a folder")):
        out = call("read_file", ctx, path=bad)
        assert out.is_error and why in out.content
    assert "only 10 lines" in call("read_file", ctx, path="notes.txt", offset_line=50).content


def test_read_file_pages_whole_lines_within_the_cap(ctx: ToolContext, kimi, workspace: Path):
    # The flagship's reference is longer than one output cap: with the defaults, each page is
    # whole lines (none cut, nothing omitted in the middle), and following "read on" from
    # page to page gives back the file exactly.
    text = (kimi.path / "reference.py").read_text()
    (workspace / "reference_copy.py").write_text(text)
    rows, offset, pages = [], 1, 0
    while True:
        out = call("read_file", ctx, path="reference_copy.py", offset_line=offset)
        assert not out.is_error and len(out.content) <= ctx.max_output_chars and "omitted" not in out.content
        body, _, note = out.content.partition("\n[lines ")
        rows += body.splitlines()
        pages += 1
        if not note:
            break
        offset = int(note.split("offset_line=")[1].rstrip("]"))
        assert offset == out.data["last"] + 1 and "the page was full" in note
    assert pages >= 3
    assert [row.split("| ", 1)[1] if "| " in row else "" for row in rows] == text.splitlines()


def test_read_file_cuts_only_a_line_longer_than_the_cap(ctx: ToolContext, workspace: Path):
    (workspace / "wide.txt").write_text("short\n" + "x" * 20_000 + "\nafter\n")
    first = call("read_file", ctx, path="wide.txt")
    assert first.content.splitlines()[0] == "1| short" and "offset_line=2" in first.content
    wide = call("read_file", ctx, path="wide.txt", offset_line=2)
    assert len(wide.content) <= ctx.max_output_chars
    assert "line 2 cut" in wide.content and "cut -c" in wide.content and "offset_line=3" in wide.content
    assert call("read_file", ctx, path="wide.txt", offset_line=3).content == "3| after"


def test_list_files_shows_sizes_and_skips_noise(ctx: ToolContext, workspace: Path):
    for noise in ("__pycache__/x.pyc", "build/lib.so", "kern/build/obj.o"):
        (workspace / noise).parent.mkdir(parents=True, exist_ok=True)
        (workspace / noise).write_text("x")
    (workspace / "kern" / "a.cu").write_text("y" * 2048)
    out = call("list_files", ctx)
    assert not out.is_error
    assert "notes.txt  (71 B)" in out.content and "a.cu  (2.0 KiB)" in out.content and "task/" in out.content
    for hidden in ("__pycache__", "build", ".git", "x.pyc"):
        assert hidden not in out.content
    assert call("list_files", ctx, path="nowhere").is_error
    assert call("list_files", ctx, path="/").is_error


def test_write_file_creates_folders_and_respects_task(ctx: ToolContext, workspace: Path):
    out = call("write_file", ctx, path="kernels/deep/k.cu", content="a\nb\n")
    assert not out.is_error and "created kernels/deep/k.cu (2 lines" in out.content
    assert (workspace / "kernels/deep/k.cu").read_text() == "a\nb\n"
    assert "overwrote" in call("write_file", ctx, path="kernels/deep/k.cu", content="c").content
    for bad in ("task/reference.py", ".git/hooks/pre-commit", "../evil.py"):
        assert call("write_file", ctx, path=bad, content="x").is_error
    assert (workspace / "task/reference.py").read_text() == "REFERENCE = 1\n"
    assert not (workspace.parent / "evil.py").exists()
    under_a_file = call("write_file", ctx, path="notes.txt/inner.py", content="x")
    assert under_a_file.is_error and "cannot write notes.txt/inner.py" in under_a_file.content


def test_edit_file_exact_replacement(ctx: ToolContext, workspace: Path):
    path = workspace / "s.py"
    path.write_text("a = 1\nb = 1\nc = 2\n")
    out = call("edit_file", ctx, path="s.py", old="c = 2", new="c = 3")
    assert not out.is_error and "line 3" in out.content and path.read_text() == "a = 1\nb = 1\nc = 3\n"
    zero = call("edit_file", ctx, path="s.py", old="d = 4", new="")
    assert zero.is_error and "does not occur" in zero.content
    two = call("edit_file", ctx, path="s.py", old=" = 1", new=" = 9")
    assert two.is_error and "occurs 2 times" in two.content and path.read_text().count(" = 1") == 2
    both = call("edit_file", ctx, path="s.py", old=" = 1", new=" = 9", expect_count=2)
    assert not both.is_error and path.read_text() == "a = 9\nb = 9\nc = 3\n"
    assert call("edit_file", ctx, path="task/reference.py", old="1", new="2").is_error
    assert call("edit_file", ctx, path="nope.py", old="x", new="y").is_error


# -- shell -----------------------------------------------------------------------------------
def test_shell_runs_in_workspace(ctx: ToolContext, workspace: Path):
    out = call("shell", ctx, command="pwd; echo oops >&2; exit 3")
    assert not out.is_error and out.data["exit_code"] == 3
    assert out.content.startswith("exit code 3") and str(workspace.resolve()) in out.content and "oops" in out.content
    assert "exit code 0" in call("shell", ctx, command="read line || echo no-stdin").content


def test_shell_hides_credentials(ctx: ToolContext, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-fake-secret-value")
    monkeypatch.setenv("KAGENT_VISIBLE_MARKER", "visible-marker")
    out = call("shell", ctx, command="env")
    assert "visible-marker" in out.content
    assert "sk-fake-secret-value" not in out.content and "ANTHROPIC_API_KEY" not in out.content


def test_shell_timeout_kills_the_group(ctx: ToolContext, workspace: Path):
    # Found by a marker on its command line: in a pid namespace `$!` is not a pid out here.
    marker = f"kagent-child-{uuid.uuid4().hex}"
    started = time.monotonic()
    out = call(
        "shell",
        ctx,
        command=f"{sys.executable} -c 'import time; time.sleep(300)' {marker} & echo started; wait",
        timeout_s=1,
    )
    assert time.monotonic() - started < 10
    assert out.is_error and out.data["timed_out"] and "killed" in out.content and "started" in out.content
    for _ in range(50):
        if not processes_with(marker):
            break
        time.sleep(0.1)
    assert not processes_with(marker)


def test_shell_is_bounded_by_the_deadline(ctx: ToolContext):
    ctx.deadline = time.monotonic() + 2.5
    started = time.monotonic()
    out = call("shell", ctx, command="sleep 30", timeout_s=120)
    assert out.data["timed_out"] and time.monotonic() - started < 10
    ctx.deadline = time.monotonic() - 1
    spent = call("shell", ctx, command="echo never")
    assert spent.is_error and "budget" in spent.content and "never" not in spent.content


def test_shell_output_is_capped(ctx: ToolContext):
    ctx.max_output_chars = 1000
    out = call("shell", ctx, command="echo FIRST; head -c 200000 /dev/zero | tr '\\0' a; echo; echo LAST")
    assert len(out.content) <= 1100
    assert "FIRST" in out.content and "LAST" in out.content and "omitted" in out.content


# -- compile ---------------------------------------------------------------------------------
# -- jobs --------------------------------------------------------------------------------------
def _status_until_ended(jobs: Jobs, ctx: ToolContext, job: int, within_s: float = 60):
    deadline = time.monotonic() + within_s
    while True:
        out = jobs.run({"action": "status", "job": job}, ctx)
        if not out.data["running"] or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def test_a_job_runs_in_the_background_and_its_log_is_polled(ctx: ToolContext, workspace: Path):
    jobs = Jobs()  # a run's table of jobs
    started = time.monotonic()
    out = jobs.run(dict(action="start", command="echo begin; sleep 2; echo end; exit 4"), ctx)
    assert not out.is_error and out.content.startswith("job 1 started") and time.monotonic() - started < 30
    assert out.data["log"] == "build/jobs/1.log"
    running = jobs.run(dict(action="status", job=1), ctx)
    assert running.data["running"] and "job 1: running for" in running.content, running.content
    ended = _status_until_ended(jobs, ctx, 1)
    assert "job 1: exited with code 4 after" in ended.content and ended.data["exit_code"] == 4
    assert ended.content.endswith("its last lines:\nbegin\nend")
    assert (workspace / "build" / "jobs" / "1.log").read_text() == "begin\nend\n"
    jobs.run(dict(action="start", command="seq 1000"), ctx)
    assert _status_until_ended(jobs, ctx, 2).content.endswith("\n".join(str(i) for i in range(961, 1001)))
    assert jobs.run(dict(action="status", job=2, tail_lines=3), ctx).content.endswith("998\n999\n1000")
    listed = jobs.run(dict(action="list"), ctx).content.splitlines()
    assert [line.split(":")[0] for line in listed] == ["job 1", "job 2"]
    jobs.close()


def test_a_job_is_killed_at_its_time_limit(ctx: ToolContext):
    jobs = Jobs()
    jobs.run(dict(action="start", command="echo waiting; sleep 300", timeout_s=1), ctx)
    out = _status_until_ended(jobs, ctx, 1)
    assert "job 1: killed at its time limit after" in out.content and out.data["how"] == "killed at its time limit"
    assert out.content.endswith("waiting")


def test_job_mistakes_are_errors(ctx: ToolContext):
    jobs = Jobs()
    assert jobs.run(dict(action="list"), ctx).content == "no jobs yet"
    assert "start needs a command" in jobs.run(dict(action="start"), ctx).content
    missing = jobs.run(dict(action="status", job=3), ctx)
    assert missing.is_error and "there is no job 3" in missing.content and "restart" in missing.content
    assert jobs.run(dict(action="stop"), ctx).is_error
    for _ in range(4):
        assert not jobs.run(dict(action="start", command="sleep 300"), ctx).is_error
    crowded = jobs.run(dict(action="start", command="true"), ctx)
    assert crowded.is_error and "4 jobs are running already (1, 2, 3, 4)" in crowded.content
    stopped = jobs.run(dict(action="stop", job=2), ctx)
    assert "job 2: stopped after" in stopped.content and not stopped.data["running"]
    assert not jobs.run(dict(action="start", command="true"), ctx).is_error
    _status_until_ended(jobs, ctx, 5)
    jobs.close()
    states = {
        line.split(":")[0]: line.split(":")[1].strip()
        for line in jobs.run(dict(action="list"), ctx).content.splitlines()
    }
    assert [job for job, state in states.items() if state.startswith("killed at the run's end")] == [
        "job 1",
        "job 3",
        "job 4",
    ]
    assert states["job 2"].startswith("stopped") and states["job 5"].startswith("exited with code 0")


def test_parse_ptxas_report():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4heavyPf' for 'sm_90'
ptxas info    : Function properties for _Z4heavyPf
    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compiling entry function '_Z5lightv' for 'sm_90'
ptxas info    : Used 8 registers, 352 bytes cmem[0]
"""
    heavy, light = parse_ptxas(log)
    assert heavy == {
        "name": "_Z4heavyPf",
        "arch": "sm_90",
        "entry": True,
        "registers": 255,
        "spill_stores": 16,
        "spill_loads": 12,
        "shared_mem": 4096,
        "stack_frame": 24,
        "constant_mem": 388,
        "barriers": 1,
    }
    assert light["registers"] == 8 and light["constant_mem"] == 352 and light["spill_stores"] == 0


@needs_nvcc
def test_compile_cu_reports_resources(ctx: ToolContext, workspace: Path):
    (workspace / "k.cu").write_text(GOOD_CU)
    out = call("compile", ctx, path="k.cu")
    assert not out.is_error, out.content
    (kernel,) = out.data["kernels"]
    assert kernel["name"] == "_Z3addPfPKfi" and kernel["arch"] == "sm_90"
    assert kernel["registers"] > 0 and kernel["shared_mem"] == 1024 and kernel["spill_stores"] == 0
    assert "regs" in out.content and "1024" in out.content
    assert not list(workspace.glob("*.o"))  # the object file goes to a temporary folder


@needs_nvcc
def test_compile_cu_syntax_error(ctx: ToolContext, workspace: Path):
    (workspace / "bad.cu").write_text(BAD_CU)
    out = call("compile", ctx, path="bad.cu")
    assert out.is_error and out.data["kernels"] == []
    assert out.data["errors"] and "error" in out.data["errors"][0]
    assert out.content.index("first errors:") < out.content.index("full output:")
    assert 'expected a ";"' in out.content


def test_compile_without_nvcc(ctx: ToolContext, workspace: Path, tmp_path: Path):
    (workspace / "k.cu").write_text(GOOD_CU)
    ctx.env = {"PATH": str(tmp_path / "empty"), "HOME": str(tmp_path)}
    out = call("compile", ctx, path="k.cu")
    assert out.is_error and "nvcc is not installed" in out.content


def test_compile_python_imports_in_a_fresh_process(ctx: ToolContext, workspace: Path):
    (workspace / "helper.py").write_text("VALUE = 3\n")
    (workspace / "good.py").write_text("import helper\nassert helper.VALUE == 3\n")
    out = call("compile", ctx, path="good.py")
    assert not out.is_error and "ok" in out.content.splitlines()[0]
    (workspace / "bad.py").write_text("x = 1\ndef f(:\n    pass\n")
    out = call("compile", ctx, path="bad.py")
    assert out.is_error and "SyntaxError" in out.content
    assert call("compile", ctx, path="notes.txt").is_error
    assert call("compile", ctx, path="../k.cu").is_error


def test_compile_python_runs_one_warm_up_step_and_says_plainly_there_is_no_gpu(ctx: ToolContext, kimi, workspace: Path):
    reference_solution(kimi, workspace)
    out = call("compile", ctx, path="solution.py")
    assert not out.is_error, out.content
    first = out.content.splitlines()[0]
    assert "one warm-up step of its Model on cpu (context 16): ok" in first, first
    assert out.data["stepped"] and out.data["triton"] == [] and out.data["libraries"] == []
    assert "no GPU here: the warm-up step ran on the CPU, so no Triton kernel was compiled" in out.content
    reference_solution(kimi, workspace, patch=RAISING_STEP)
    out = call("compile", ctx, path="solution.py")
    assert out.is_error and "kernel exploded on purpose" in out.content and not out.data["stepped"]


# The device code of a library made with nvcc -shared, which a solution loads as its own (a
# load_inline extension is such a library, in the build home): as cuobjdump 13.5 read it.
RES_USAGE = """
Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function _Z5heavyPfi:
  REG:40 STACK:256 SHARED:5120 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z3addPfPKfi:
  REG:10 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:548 CONSTANT[2]:8 TEXTURE:0 SURFACE:0 SAMPLER:0

Fatbin ptx code:
================
arch = sm_90
"""


def test_parse_res_usage():
    heavy, add = parse_res_usage(RES_USAGE)
    assert heavy == {
        "name": "_Z5heavyPfi",
        "arch": "sm_90",
        "registers": 40,
        "stack_frame": 256,
        "shared_mem": 5120,
        "local_mem": 0,
        "constant_mem": 540,
    }
    assert add["registers"] == 10 and add["constant_mem"] == 556
    table = res_usage_table([heavy, add]).splitlines()
    assert table[1].startswith("_Z5heavyPfi | sm_90 | 40 | 256 | 0 | 5120 | 540") and "local memory" in table[1]
    assert "local memory" not in table[2]


HEAVY_CU = """
__global__ void heavy(float* out, int n) {
  __shared__ float tile[1024];
  float acc[64];
  for (int k = 0; k < 64; ++k) acc[k] = out[(threadIdx.x + k * 7) % n];
  tile[threadIdx.x] = acc[threadIdx.x % 64];
  __syncthreads();
  float s = 0;
  for (int k = 0; k < 64; ++k) s += acc[(k * 13 + threadIdx.x) % 64] * tile[(k + threadIdx.x) % 1024];
  out[threadIdx.x] = s;
}
"""


@needs_nvcc
def test_compile_python_reports_the_device_code_of_the_libraries_it_loads(ctx: ToolContext, workspace: Path):
    # Built here by nvcc and cc; the file only loads them, with no flag asking for a report.
    (workspace / "heavy.cu").write_text(HEAVY_CU + GOOD_CU)
    subprocess.run(
        [
            "nvcc",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-arch=sm_90",
            "-o",
            str(workspace / "libheavy.so"),
            str(workspace / "heavy.cu"),
        ],
        check=True,
        capture_output=True,
    )
    (workspace / "plain.c").write_text("int plain(void) { return 1; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(workspace / "libplain.so"), str(workspace / "plain.c")], check=True
    )
    (workspace / "loads.py").write_text(
        "import ctypes, pathlib\nhere = pathlib.Path(__file__).parent\n"
        "heavy = ctypes.CDLL(str(here / 'libheavy.so'))\n"
        "plain = ctypes.CDLL(str(here / 'libplain.so'))\n"
    )
    out = call("compile", ctx, path="loads.py")
    assert not out.is_error, out.content
    by_path = {Path(lib["path"]).name: lib for lib in out.data["libraries"]}
    assert set(by_path) == {"libheavy.so", "libplain.so"}
    assert by_path["libplain.so"]["kernels"] == [] and by_path["libplain.so"]["note"] == "no device code"
    kernels = {k["name"]: k for k in by_path["libheavy.so"]["kernels"]}
    assert set(kernels) == {"_Z5heavyPfi", "_Z3addPfPKfi"} and all(k["registers"] > 0 for k in kernels.values())
    # cuobjdump counts the shared memory the system reserves per block (1 KB on sm_90) too.
    assert kernels["_Z5heavyPfi"]["shared_mem"] - kernels["_Z3addPfPKfi"]["shared_mem"] == 4096 - 1024
    assert kernels["_Z3addPfPKfi"]["shared_mem"] >= 1024
    assert "device code of libheavy.so (cuobjdump -res-usage)" in out.content and "libplain" not in out.content
    # Without cuobjdump the library is named, and why its device code is not shown.
    ctx.env = {**scrubbed_env(), "PATH": str(workspace / "empty")}
    monkey = pytest.MonkeyPatch()
    monkey.setattr(compile_tool, "find_cuda_tool", lambda name, path: None)
    try:
        out = call("compile", ctx, path="loads.py")
    finally:
        monkey.undo()
    assert not out.is_error and "libheavy.so: cuobjdump not found" in out.content


def test_triton_kernels_are_reported_from_their_compiled_metadata():
    # Metadata that Triton 3.6 compiled for sm_90, with the registers and local memory the
    # driver reports for those cubins (recorded by lab/scripts/record_triton_fixture.py).
    recorded = json.loads((Path(__file__).parent / "fixtures" / "triton_kernels.json").read_text())["kernels"]
    records = []
    for entry in recorded:
        kernel = SimpleNamespace(
            metadata=SimpleNamespace(**entry["metadata"]), n_regs=entry["n_regs"], n_spills=entry["n_spills"]
        )
        records.append(triton_kernel_record(kernel, entry["compile_s"], cached=False))
    add, matmul = records
    assert add == {
        "name": "add_kernel",
        "registers": 30,
        "spill_bytes": 0,
        "shared_mem": 0,
        "num_warps": 4,
        "num_stages": 3,
        "num_ctas": 1,
        "arch": "sm90",
        "cooperative_launch": False,
        "compile_s": recorded[0]["compile_s"],
        "cached": False,
    }
    assert matmul["registers"] == 128 and matmul["spill_bytes"] == 1032 and matmul["shared_mem"] == 32768
    # Not loaded yet (compiled, never launched): no registers to report.
    unloaded = triton_kernel_record(SimpleNamespace(metadata=SimpleNamespace(**recorded[0]["metadata"])), 0.01, True)
    assert unloaded["registers"] is None and unloaded["spill_bytes"] is None and unloaded["cached"]
    rows = triton_table([add, matmul, unloaded]).splitlines()
    assert rows[0] == "kernel | arch | regs | spill B | smem B | warps | stages | compile s"
    assert rows[2].startswith("matmul_kernel | sm90 | 128 | 1032 | 32768 | 4 | 3 | ") and rows[2].endswith("<- spills")
    assert rows[3] == "add_kernel | sm90 | - | - | 0 | 4 | 3 | 0.01 (from Triton's cache)"


def test_each_triton_compile_is_recorded_and_timed(tmp_path: Path, monkeypatch):
    # Triton's layout, standing in for it (CI has no Triton): a kernel's first launch calls
    # triton.compiler.compile, bound when the kernel is first launched; this one writes the
    # cache folder a real compile makes, and finds it there the second time.
    package = tmp_path / "stand-in" / "triton"
    (package / "compiler").mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '3.6.0-stand-in'\nfrom . import compiler\n")
    (package / "compiler" / "__init__.py").write_text("from .compiler import compile\n")
    (package / "compiler" / "compiler.py").write_text(
        "import os, pathlib, types\n"
        "def compile(src, target=None, options=None):\n"
        "    (pathlib.Path(os.environ['TRITON_CACHE_DIR']) / src).mkdir(parents=True, exist_ok=True)\n"
        "    meta = types.SimpleNamespace(name=src, shared=0, num_warps=4, num_stages=2)\n"
        "    return types.SimpleNamespace(metadata=meta, n_regs=32, n_spills=2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "stand-in"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        monkeypatch.delitem(sys.modules, name)
    compiles = TritonCompiles()
    from triton.compiler import compile as bound_at_first_launch

    bound_at_first_launch("step_kernel")
    bound_at_first_launch("step_kernel")
    sys.modules["triton"].compiler.compile("norm_kernel")
    records = compiles.records(on_gpu=False)
    assert [(r["name"], r["cached"]) for r in records] == [
        ("step_kernel", False),
        ("step_kernel", True),
        ("norm_kernel", False),
    ]
    assert records[0]["registers"] == 32 and records[0]["spill_bytes"] == 8 and compiles.version == "3.6.0-stand-in"


# -- check, benchmark, profile ---------------------------------------------------------------
@pytest.mark.slow
def test_check_and_benchmark_pass_with_the_reference(ctx: ToolContext, kimi, workspace: Path):
    reference_solution(kimi, workspace)
    checked = call("check", ctx)
    assert not checked.is_error and checked.evaluation is not None
    assert checked.evaluation.verdict is Verdict.PASS and checked.evaluation.mode == "check"
    assert checked.content.startswith("verdict: PASS")
    # A context of the scale's three chosen, the middle one, as the model may choose it: the one
    # test of EvalOptions.contexts through a whole evaluation.
    timed = call("benchmark", ctx, contexts=[32])
    result = timed.evaluation
    assert not timed.is_error and result is not None and result.verdict is Verdict.PASS
    assert [t.context_len for t in result.timings] == [32] and result.score is not None
    for piece in (
        "ctx 32: baseline",
        "ms/token",
        "speedup",
        "95% CI",
        "tok/s",
        "bytes floor",
        "launches per step",
        "score (geomean speedup)",
    ):
        assert piece in timed.content
    assert timed.data["verdict"] == "pass"


@pytest.mark.slow
def test_wrong_solution_is_a_measurement_not_an_error(ctx: ToolContext, kimi, workspace: Path):
    reference_solution(kimi, workspace, patch=WRONG_STEP)
    out = call("check", ctx)
    assert not out.is_error and out.evaluation.verdict is Verdict.INCORRECT
    assert out.content.startswith("verdict: INCORRECT") and "cosine" in out.content


@pytest.mark.slow
def test_evaluation_errors_the_model_can_cause(ctx: ToolContext, kimi, workspace: Path):
    missing = call("check", ctx)
    assert missing.is_error and "solution.py" in missing.content and missing.evaluation is None
    reference_solution(kimi, workspace)
    unknown = call("benchmark", ctx, contexts=[12345])
    assert unknown.is_error and "the task cannot be evaluated: no shape with context in [12345]" in unknown.content


@pytest.mark.slow
def test_profile_on_cpu_with_a_cold_cache_builds_the_weights_without_writing_it(
    ctx: ToolContext, kimi, workspace: Path, tmp_path: Path
):
    # The cache is read-only to the profiler's child (inside the jail): weights it builds
    # stay in its own folder, and the cache stays empty.
    cold = tmp_path / "cold-cache"
    cold.mkdir()
    ctx.eval_options = ctx.eval_options.model_copy(update={"cache_dir": cold})
    reference_solution(kimi, workspace)
    ctx.env = {**scrubbed_env(), "PATH": str(Path(sys.executable).parent)}  # no ncu there
    out = call("profile", ctx, steps=2)
    assert not out.is_error, out.content
    assert "top" in out.content and "by self CPU time" in out.content and "aten::" in out.content
    assert "Nsight Compute not installed" in out.content
    assert out.data["context_len"] == 16 and len(out.data["ops"]) > 0
    table = out.content.split("\n\n")[0].splitlines()
    assert len(table) - 3 <= 15  # title, header and footer around at most 15 ops
    assert not [p for p in cold.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_profile_of_a_kernelbench_solution_builds_it_as_an_evaluation_does(
    ctx: ToolContext, workspace: Path, tmp_path: Path
):
    from kagent.tasks import resolve_task

    from test_foreign_tasks import KB_SOLUTION, KERNELBENCH_PROBLEM

    problem = tmp_path / "problems" / "linear_relu.py"
    problem.parent.mkdir()
    problem.write_text(KERNELBENCH_PROBLEM)
    ctx.task = resolve_task(str(problem))
    # It zeroes its own weights when built, and its forward checks that it was given the
    # reference's (building.build, as in an evaluation).
    (workspace / "solution.py").write_text(
        KB_SOLUTION.replace("{extra}", "")
        + """
_init, _forward = ModelNew.__init__, ModelNew.forward
def _zeroed_init(self, n_in, n_out):
    _init(self, n_in, n_out)
    torch.nn.init.zeros_(self.linear.weight)
ModelNew.__init__ = _zeroed_init
def _checked_forward(self, x):
    torch.manual_seed(42)
    reference = torch.nn.Linear(64, 32)
    assert torch.equal(self.linear.weight.cpu(), reference.weight), "not the reference's weights"
    return _forward(self, x)
ModelNew.forward = _checked_forward
"""
    )
    out = call("profile", ctx, steps=1, ncu=False)
    assert not out.is_error, out.content
    assert out.data["context_len"] is None and "aten::" in out.content


@pytest.mark.slow
def test_profile_reports_a_raising_solution(ctx: ToolContext, kimi, workspace: Path):
    reference_solution(kimi, workspace, patch=RAISING_STEP)
    out = call("profile", ctx, ncu=False)
    assert out.is_error and "kernel exploded on purpose" in out.content


def test_parse_ncu_csv():
    header = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    )

    def row(i: int, kernel: str, metric: str, unit: str, value: str) -> str:
        return (
            f'"{i}","1","python","h","{kernel}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line '
            f'profiler metrics","{metric}","{unit}","{value}"'
        )

    output = "\n".join(
        [
            "==PROF== Connected to process 1",
            header,
            row(0, "gemv", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "80"),
            row(0, "gemv", "gpu__time_duration.sum", "usecond", "1,200.5"),
            row(0, "gemv", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "20"),
            row(1, "gemv", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "60"),
            row(1, "gemv", "gpu__time_duration.sum", "usecond", "800"),
            row(1, "gemv", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "30"),
            row(2, "norm", "gpu__time_duration.sum", "nsecond", "5000"),
            "solution stdout noise",
        ]
    )
    gemv, norm = parse_ncu_csv(output)
    assert gemv == {"name": "gemv", "launches": 2, "duration_us": 2000.5, "sm_pct": 25.0, "dram_pct": 70.0}
    assert norm["duration_us"] == 5.0 and norm["launches"] == 1
    assert parse_ncu_csv("no csv here") == []


@pytest.mark.slow
def test_baseline_reports_time_per_token_and_the_floor(tmp_path, kimi, kagent_home):
    from kagent.sandbox.evaluate import EvalOptions
    from kagent.tools.base import ToolContext

    ctx = ToolContext(
        workspace=tmp_path,
        task=kimi,
        eval_options=EvalOptions(device="cpu", scale="smoke", rounds=1, cache_dir=kagent_home),
    )
    outcome = TOOLS["baseline"].run({}, ctx)
    assert not outcome.is_error, outcome.content
    for label in ("ctx 16", "ctx 32", "ctx 64"):
        assert label in outcome.content
    assert "ms per token" in outcome.content and "bytes floor" in outcome.content
    assert TOOLS["baseline"].run({"extra": 1}, ctx).is_error


DIES_LOADING = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (as a shared GPU answers)")

    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""


def test_a_baseline_that_cannot_be_measured_keeps_its_evaluation_in_the_outcome(tmp_path, kagent_home):
    """The model sees why (the verdict, the stderr's tail) and the trace keeps the whole
    evaluation: a crash's stderr is the only account of it."""
    from kagent.tasks import resolve_task

    path = tmp_path / "task" / "dies.py"
    path.parent.mkdir()
    path.write_text(DIES_LOADING)
    ctx = ToolContext(
        workspace=tmp_path,
        task=resolve_task(str(path)),
        eval_options=EvalOptions(device="cpu", scale="smoke", rounds=1, cache_dir=kagent_home),
    )
    outcome = TOOLS["baseline"].run({}, ctx)
    assert outcome.is_error and outcome.content.startswith("the baseline could not be measured."), outcome.content
    assert "CUDA out of memory" in outcome.content, outcome.content
    evaluation = outcome.data["evaluation"]
    assert evaluation["verdict"] != "pass" and "CUDA out of memory" in json.dumps(evaluation)


DOUBLES = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""


@pytest.fixture()
def counted_evaluations(monkeypatch):
    """The baseline tool's evaluations, counted: the first of each task runs, and a later one of
    the same task answers with a copy of its result. These tests hold what the tool does with
    an evaluation (measure it or read another run's, share it or not), which a copy answers as
    the evaluation again would; test_baseline_reports_time_per_token_and_the_floor and
    test_a_baseline_that_cannot_be_measured_keeps_its_evaluation_in_the_outcome run the tool's
    evaluations whole, each time."""
    import kagent.tools.baseline as baseline_module

    ran: list[str] = []
    results: dict = {}
    real = baseline_module.evaluate

    def counting(task, *args, **kwargs):
        ran.append(task.name)
        if task.name not in results:
            results[task.name] = real(task, *args, **kwargs)
        return results[task.name].model_copy(deep=True)

    monkeypatch.setattr(baseline_module, "evaluate", counting)
    return ran


def _task_file(tmp_path, name: str, source: str):
    from kagent.tasks import resolve_task

    path = tmp_path / name / f"{name}.py"
    path.parent.mkdir()
    path.write_text(source)
    return resolve_task(str(path))


def test_runs_sharing_a_lease_folder_measure_a_task_s_baseline_once(
    tmp_path, kagent_home, monkeypatch, counted_evaluations
):
    """A sweep's members (one lease folder) read the first member's measurement of a task on a
    device; another task, or runs without a lease folder, measure their own; a baseline that
    failed is not shared."""
    from kagent.sandbox.lease import HOLDER_ENV, LEASE_DIR_ENV

    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path / "leases"))
    options = EvalOptions(device="cpu", scale="smoke", rounds=1, cache_dir=kagent_home)
    doubles = _task_file(tmp_path, "doubles", DOUBLES)

    def baseline(task, holder: str):
        monkeypatch.setenv(HOLDER_ENV, holder)
        return TOOLS["baseline"].run({}, ToolContext(workspace=tmp_path / holder, task=task, eval_options=options))

    first, second = baseline(doubles, "m01"), baseline(doubles, "m02")
    assert not first.is_error and not second.is_error, (first.content, second.content)
    assert counted_evaluations == ["doubles"]
    assert "shared_from" not in first.data
    assert second.data["shared_from"]["holder"] == "m01" and second.data["timings"] == first.data["timings"]
    assert "measured once for every run on this device by m01" in second.content
    # Another task's baseline is its own; a failed one is measured again by the next run.
    dies = _task_file(tmp_path, "dies", DIES_LOADING)
    assert baseline(dies, "m01").is_error and baseline(dies, "m02").is_error
    assert counted_evaluations == ["doubles", "dies", "dies"]
    # Without a lease folder every run measures.
    monkeypatch.delenv(LEASE_DIR_ENV)
    assert "shared_from" not in baseline(doubles, "m03").data
    assert counted_evaluations == ["doubles", "dies", "dies", "doubles"]


def test_a_run_waits_for_another_s_baseline_only_until_its_deadline(
    tmp_path, kagent_home, monkeypatch, counted_evaluations
):
    import fcntl
    import os

    from kagent.sandbox.lease import LEASE_DIR_ENV
    from kagent.tools.baseline import shared_baseline_file

    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path / "leases"))
    options = EvalOptions(device="cpu", scale="smoke", rounds=1, cache_dir=kagent_home)
    doubles = _task_file(tmp_path, "doubles", DOUBLES)
    shared = shared_baseline_file(doubles, options.model_copy(update={"mode": "aa"}))
    assert shared is not None
    held = os.open(shared.with_name(shared.name + ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # another run, measuring
    try:
        ctx = ToolContext(workspace=tmp_path, task=doubles, eval_options=options, deadline=time.monotonic() + 2.0)
        began = time.monotonic()
        outcome = TOOLS["baseline"].run({}, ctx)
    finally:
        os.close(held)
    assert outcome.is_error and "while another run on this device measured the baseline" in outcome.content
    assert time.monotonic() - began < 5 and counted_evaluations == []


def test_a_wait_returns_when_the_job_ends_or_at_its_timeout(ctx: ToolContext):
    jobs = Jobs()
    jobs.run(dict(action="start", command="sleep 1; echo built"), ctx)
    started = time.monotonic()
    ended = jobs.run(dict(action="wait", job=1, timeout_s=120), ctx)
    assert time.monotonic() - started < 60 and not ended.data["running"]
    assert ended.content.startswith("waited ") and "for job 1 to end" in ended.content
    assert "job 1: exited with code 0" in ended.content and ended.content.endswith("built")
    jobs.run(dict(action="start", command="sleep 300"), ctx)
    started = time.monotonic()
    still = jobs.run(dict(action="wait", job=2, timeout_s=1), ctx)
    assert 0.9 < time.monotonic() - started < 30 and still.data["running"]
    assert still.content.startswith("waited 1 s; job 2 is still running.")
    jobs.close()
