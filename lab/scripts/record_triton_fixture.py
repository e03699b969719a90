"""Record tests/fixtures/triton_kernels.json: Triton's compiled-kernel metadata for two kernels,
compiled for sm_90 without a GPU (triton.compile with an explicit target), with the registers
and local memory the driver would report for each cubin, read by cuobjdump -res-usage (Triton
reads them from the driver once a kernel is loaded: n_regs, and n_spills = local bytes / 4).

    python lab/scripts/record_triton_fixture.py      (needs triton and cuobjdump; no GPU)

The compile tool's report is tested on the CPU with these records (tests/test_tools.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from kernel_reports import find_cuda_tool, parse_res_usage  # noqa: E402  (kagent need not be installed)

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "triton_kernels.json"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(
            tl.load(a + rm[:, None] * K + (k + rk)[None, :]), tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        )
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


KERNELS = [
    (
        add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 1024},
        {"num_warps": 4},
    ),
    # Capped at 128 registers per thread, so that it spills: a row with spills and shared memory.
    (
        matmul_kernel,
        {
            "a": "*bf16",
            "b": "*bf16",
            "c": "*bf16",
            "M": "i32",
            "N": "i32",
            "K": "i32",
            "BM": "constexpr",
            "BN": "constexpr",
            "BK": "constexpr",
        },
        {"BM": 128, "BN": 128, "BK": 64},
        {"num_warps": 4, "num_stages": 3, "maxnreg": 128},
    ),
]


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    return str(value)


def main() -> None:
    cuobjdump = find_cuda_tool("cuobjdump", None)
    records = []
    for fn, signature, constexprs, options in KERNELS:
        began = time.perf_counter()
        kernel = triton.compile(
            ASTSource(fn, signature=signature, constexprs=constexprs), target=GPUTarget("cuda", 90, 32), options=options
        )
        seconds = time.perf_counter() - began
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(kernel.asm["cubin"])
            cubin.flush()
            usage = parse_res_usage(
                subprocess.run([cuobjdump, "-res-usage", cubin.name], capture_output=True, text=True, check=True).stdout
            )[0]
        metadata = {k: _plain(v) for k, v in kernel.metadata._asdict().items() if k != "extern_libs"}
        local = usage["stack_frame"] + usage["local_mem"]
        records.append(
            {
                "metadata": metadata,
                "n_regs": usage["registers"],
                "n_spills": local // 4,
                "compile_s": round(seconds, 3),
                "cuobjdump": usage,
            }
        )
    FIXTURE.write_text(
        json.dumps(
            {
                "recorded_with": f"lab/scripts/record_triton_fixture.py, triton {triton.__version__}, "
                f"target sm_90, no GPU; n_regs and n_spills from cuobjdump -res-usage of each cubin "
                f"(local = stack + local bytes)",
                "kernels": records,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
