"""What the CPU can prove of lab/scripts/gpu_megakernel.sh before it runs on a GPU: the figures
computed from timings, the summary the playbook is written from, the kernels compiled (nvcc
for the CUDA ones, Triton's compiler for sm_90 where Triton is installed), and the stage
instruments run end to end on the two-stage solution's torch stand-in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kagent.tools.kernel_reports import find_cuda_tool

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "lab" / "scripts"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(SCRIPTS / "two_stage"))
import megakernel_probes as probes  # noqa: E402
import solution as two_stage  # noqa: E402
import stage_tools_run  # noqa: E402

from lab_isolation import isolated_env  # noqa: E402, F401  (autouse)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:
    triton = None
needs_triton = pytest.mark.skipif(triton is None, reason="Triton is not installed")


def test_figures_from_timings():
    assert probes.per_barrier_us(3.0, 1.0, 2000) == pytest.approx(1.0)
    res = probes.timer_resolution_ns([0, 0, 32, 32, 64, 1056, 1056])
    assert res == {"least_step_ns": 32, "median_step_ns": 32, "unchanged_share": 0.5}
    assert probes.timer_resolution_ns([5, 5, 5])["least_step_ns"] == 0.0


def test_co_resident_programs_per_sm():
    # 8 warps of 32 registers: 8192 registers a program, 8 in 65536; threads allow 8 too.
    assert two_stage.co_resident_per_sm(32, 8, 64) == 8
    assert two_stage.co_resident_per_sm(33, 8, 64) == 6  # rounded up to 40 a thread
    assert two_stage.co_resident_per_sm(255, 8, 0) == 1
    assert two_stage.co_resident_per_sm(32, 4, 100 * 1024) == 2  # shared memory caps it


def test_summary_lines():
    env = {
        "nvidia_smi": "NVIDIA H200, GPU-1234, 580.1",
        "torch": "2.11",
        "triton": "3.6",
        "utc": "2026-12-02T10:00:00Z",
    }
    tri = {
        "environment": env,
        "triton": {
            "launch_1_arg": {"queued_us": 21.0, "completed_us": 21.5},
            "launch_24_args": {"queued_us": 40.0, "completed_us": 40.2},
            "software_barrier": {"132": {"us_per_barrier": 0.91}, "264": {"us_per_barrier": 1.02}},
        },
    }
    cu = {
        "environment": env,
        "cuda": {
            "grid_sync_barrier": {"132": {"us_per_barrier": 1.01}},
            "software_barrier": {"132": {"us_per_barrier": 0.8}},
            "launch_loop_in_cpp": {"queued_us": 2.1, "completed_us": 3.9},
            "max_blocks_per_sm": {"grid.sync": 16, "software": 16, "threads": 128},
            "coop_refusal_of_a_grid_too_large": "too many blocks in cooperative launch",
            "globaltimer": {"least_step_ns": 32, "median_step_ns": 1024, "unchanged_share": 0.9},
            "int4_gemv": {
                "K": 4096,
                "N": 65536,
                "bytes": 142_000_000,
                "relative_error": 2e-7,
                "splits_1_plain": {"us": 50.0, "gb_per_s": 2840.0},
                "splits_4_evict_first": {"us": 40.0, "gb_per_s": 3550.0},
                "copy_gb_per_s": 4200.0,
            },
        },
    }
    lines = probes.summary_lines(tri, cu)
    assert lines[0] == "NVIDIA H200, GPU-1234, 580.1; torch 2.11, triton 3.6, 2026-12-02T10:00:00Z"
    assert "Triton software barrier: 0.91 µs at 132 blocks, 1.02 µs at 264 blocks" in lines
    assert "cooperative grid.sync (load_inline): 1.01 µs at 132 blocks" in lines
    assert "Triton launch, 24 arguments: 40.0 µs queued, 40.2 µs completed per launch" in lines
    assert "C++ launch in a loop (load_inline): 2.1 µs queued, 3.9 µs completed per launch" in lines
    assert "cooperative launch of SMs x 16 + 1 blocks: too many blocks in cooperative launch" in lines
    assert lines[-1].endswith("copy 4200 GB/s; best splits_4_evict_first")
    assert probes.summary_lines({}, {}) == []  # a part that did not run gives no line


@needs_nvcc
def test_the_cuda_kernels_compile_for_sm90(tmp_path):
    source = tmp_path / "kernels.cu"
    source.write_text(probes.KERNELS)
    done = subprocess.run(
        [
            "nvcc",
            "-c",
            "-O3",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-Xptxas",
            "-v",
            str(source),
            "-o",
            str(tmp_path / "kernels.o"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    assert "spill stores" in done.stderr and "int4_gemv_kernel" in done.stderr
    assert " 0 bytes spill stores" in done.stderr


@needs_triton
def test_the_triton_kernels_compile_for_sm90():
    target = GPUTarget("cuda", 90, 32)
    _, _, barriers = probes.triton_kernels()
    ptx = triton.compile(
        ASTSource(fn=barriers, signature={"counter": "*i32", "base": "i32", "n": "i32"}),
        target=target,
        options={"num_warps": 4},
    ).asm["ptx"]
    assert "atom.global.gpu.release.add" in ptx and "fence.acq_rel.gpu" in ptx and "ld.volatile.global" in ptx
    signature = {
        "a": "*i32",
        "n_a": "i32",
        "b": "*i32",
        "n_b": "i32",
        "partials": "*i32",
        "out": "*i64",
        "counter": "*i32",
        "epoch": "i32",
        "stop_after": "i32",
        "stamps": "*i64",
        "BLOCK": "constexpr",
    }
    kernel = triton.compile(
        ASTSource(fn=two_stage._two_stages, signature=signature, constexprs={"BLOCK": two_stage.BLOCK}),
        target=target,
        options={"num_warps": two_stage.WARPS},
    )
    ptx = kernel.asm["ptx"]
    assert ptx.count("atom.global.gpu.release.add") == 2 and ptx.count("%globaltimer") == 3
    assert ptx.count("fence.acq_rel.gpu") == 2


@needs_triton
def test_the_megakernel_s_split_down_projection_compiles_for_sm90():
    # Before a device call is spent on it: the variant compiles for the H200 at full scale, its
    # count of a tile's pieces is an acquire-release atomic (besides the grid barrier's), and
    # it fits the registers without spilling more than the kernel without it (every other switch
    # off too: each is on by default, and each adds its own atomics).
    script = REPO / "lab" / "megakernel" / "compile_sm90.py"
    off = {"ROUTE_ONCE": 0, "SPLIT_SH": 1, "BN_SH": 16, "BAR_COUNT": 0}
    variants = [
        json.dumps({"name": name, "consts": {"SPLIT_F": split, **off}}) for name, split in (("none", 0), ("split", 1))
    ]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("KIMI_")}
    done = subprocess.run(
        [sys.executable, str(script), "--variant", variants[0], "--variant", variants[1]],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    now, split = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert (now["acq_rel_atomics"], split["acq_rel_atomics"]) == (1, 2)

    def figures(row):
        (line,) = [line for line in row["ptxas"] if "registers" in line]
        frame = next(line for line in row["ptxas"] if "stack frame" in line)
        return int(line.split("Used ")[1].split()[0]), int(frame.split()[0])

    (now_regs, now_frame), (split_regs, split_frame) = figures(now), figures(split)
    assert now_regs <= 255 and split_regs <= 255 and split_frame <= now_frame


@needs_triton
@pytest.mark.skipif(find_cuda_tool("nvdisasm", None) is None, reason="nvdisasm is not installed")
def test_compile_sm90_names_the_loops_of_a_stage_and_what_one_pass_issues():
    # The attention's block loop, read off the sm_90a SASS without a GPU: one pass of its body
    # runs the tensor-core products on operands read from shared memory, and waits at the
    # program's barrier (2026-12-06: 875 instructions, 200 HMMA, 170 LDSM, 8 BAR a 32-row block;
    # 1,050, 264 HMMA, for the 64-row blocks built since).
    script = REPO / "lab" / "megakernel" / "compile_sm90.py"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("KIMI_")}
    done = subprocess.run(
        [sys.executable, str(script), "--loops", "_mla_attend"], capture_output=True, text=True, timeout=1800, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loops = json.loads(done.stdout.strip().splitlines()[-1])["loops"]["_mla_attend"]
    assert loops and all(loop["of_the_function"] >= 0.5 for loop in loops)
    block = loops[0]  # the innermost: the fewest instructions
    assert block["opcodes"]["HMMA"] > 0 and block["opcodes"]["LDSM"] > 0 and block["opcodes"]["BAR"] > 0
    assert all(block["instructions"] <= loop["instructions"] for loop in loops)
    refused = subprocess.run(
        [sys.executable, str(script), "--loops", "no_such_stage"], capture_output=True, text=True, timeout=600, env=env
    )
    assert refused.returncode != 0 and "no jit function ['no_such_stage']" in refused.stderr


def test_the_stage_tools_on_the_two_stage_stand_in(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert stage_tools_run.main("stages", out, tmp_path / "work") == 0
    assert stage_tools_run.main("ncu", out, tmp_path / "work") == 1  # no Nsight Compute here; on the GPU it runs
    assert "ncu not on PATH" in json.loads((out / "ncu_tool.json").read_text())["content"]
    report = json.loads((out / "stage_tools.json").read_text())
    assert report["device"] == "cpu" and not report["stages"]["is_error"], report["stages"]["content"]
    assert [r["name"] for r in report["stages"]["data"]["stages"]] == ["stream a", "stream b"]
    content = report["stages"]["content"]
    assert "| 0.3 MB |" in content and "| 0.1 MB |" in content  # 64 Ki and 32 Ki int32 words
    assert "stamped stages add up to" in content
    assert set(report["agreement"]) == {"stages_us", "base_us", "step_us", "ratio"}
    assert report["own_step"]["correct"]
