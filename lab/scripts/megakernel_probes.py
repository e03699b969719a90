"""Measurements behind the megakernel playbook (prompts/playbook.md), on one GPU.

    python lab/scripts/megakernel_probes.py triton OUT.json   # Triton: launch cost, software grid barrier
    python lab/scripts/megakernel_probes.py cuda OUT.json     # load_inline: launch costs, grid.sync,
                                                          # a CUDA software barrier, globaltimer, int4 GEMV
    python lab/scripts/megakernel_probes.py summary TRITON.json CUDA.json   # the figures the playbook cites

Each part prints a table and writes its figures as JSON. A grid barrier's cost is the time of a
kernel that passes N barriers less the time of the same kernel passing none, over N; a launch's
host cost is the wall time of many back-to-back launches over their number. Every grid is
checked against what the compiled kernel can hold at once (more would hang at the first barrier).
Run by lab/scripts/gpu_megakernel.sh; the CPU tests compile the kernels (tests/test_megakernel_probes.py).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BARRIERS = 2000  # barriers per timed kernel
LAUNCHES = 3000  # launches per launch-cost sample
REPEATS = 7  # samples per figure; the median is reported
GRIDS_PER_SM = (1, 2, 4)  # barrier grids: this many programs (blocks) per SM
GEMV_K, GEMV_N = 4096, 65536  # int4 weight (in, out): 134 MB of payload, past the 60 MB L2
GEMV_COPIES = 3  # weight copies rotated between runs, so that L2 holds none of the next one's

# The kernels (plain CUDA: the CPU tests compile them with nvcc), then their torch bindings.
KERNELS = r"""
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>
namespace cg = cooperative_groups;

__global__ void empty_kernel(int* p) { if (p == nullptr) asm volatile(""); }

__global__ void coop_barriers_kernel(int n) {
    cg::grid_group grid = cg::this_grid();
    for (int i = 0; i < n; ++i) grid.sync();
}

__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A software grid barrier: a counter that only grows; barrier i of this launch waits for base + (i + 1) * blocks.
__global__ void soft_barriers_kernel(int* counter, int base, int n) {
    for (int i = 0; i < n; ++i) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(counter, 1);
            const int target = base + (i + 1) * (int)gridDim.x;
            while (load_acquire(counter) < target) {}
        }
        __syncthreads();
    }
}

__global__ void globaltimer_kernel(int64_t* out, int n) {
    if (threadIdx.x != 0) return;
    for (int i = 0; i < n; ++i) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
        out[i] = (int64_t)t;
    }
}

// int4 GEMV y += x @ W, W (K, N) packed as (K/2, N) bytes, bf16 scales and zeros per 128 rows.
// A block: 8 warps over 512 columns (16 per lane, one 16-byte load per byte row); each warp takes
// 8 byte rows of a group (one load of its scales and zeros), all 8 loads in flight before use;
// blockIdx.y splits K; the 8 warps add up in shared memory and the splits by atomics.
template <bool STREAM>
__global__ void __launch_bounds__(256) int4_gemv_kernel(
        const __nv_bfloat16* __restrict__ x, const uint8_t* __restrict__ wq, const __nv_bfloat16* __restrict__ scales,
        const __nv_bfloat16* __restrict__ zeros, float* __restrict__ y, int K, int N, int groups_per_split) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int col = blockIdx.x * 512 + lane * 16;
    float acc[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) acc[c] = 0.f;
    const int g_begin = blockIdx.y * groups_per_split;
    const int g_end = min(g_begin + groups_per_split, K / 128);
    for (int g = g_begin; g < g_end; ++g) {
        const int row0 = g * 64 + warp * 8;  // byte rows of this warp in group g
        uint4 packed[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const uint4* p = reinterpret_cast<const uint4*>(wq + (size_t)(row0 + u) * N + col);
            packed[u] = STREAM ? __ldcs(p) : __ldg(p);
        }
        uint4 s_raw[2], z_raw[2];
        s_raw[0] = __ldg(reinterpret_cast<const uint4*>(scales + (size_t)g * N + col));
        s_raw[1] = __ldg(reinterpret_cast<const uint4*>(scales + (size_t)g * N + col + 8));
        z_raw[0] = __ldg(reinterpret_cast<const uint4*>(zeros + (size_t)g * N + col));
        z_raw[1] = __ldg(reinterpret_cast<const uint4*>(zeros + (size_t)g * N + col + 8));
        const __nv_bfloat16* s = reinterpret_cast<const __nv_bfloat16*>(s_raw);
        const __nv_bfloat16* z = reinterpret_cast<const __nv_bfloat16*>(z_raw);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int k = 2 * (row0 + u);
            const float x0 = __bfloat162float(x[k]), x1 = __bfloat162float(x[k + 1]);
            const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&packed[u]);
#pragma unroll
            for (int c = 0; c < 16; ++c) {
                const float zc = __bfloat162float(z[c]);
                const float lo = (float)(bytes[c] & 0xF) - zc, hi = (float)(bytes[c] >> 4) - zc;
                acc[c] += __bfloat162float(s[c]) * (lo * x0 + hi * x1);
            }
        }
    }
    __shared__ float part[8][512];
#pragma unroll
    for (int c = 0; c < 16; ++c) part[warp][lane * 16 + c] = acc[c];
    __syncthreads();
    for (int i = threadIdx.x; i < 512; i += 256) {
        float t = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w) t += part[w][i];
        atomicAdd(&y[blockIdx.x * 512 + i], t);
    }
}

// Both variants compiled here, so that the kernels alone (without the bindings) build in full.
template __global__ void int4_gemv_kernel<true>(const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                const __nv_bfloat16*, float*, int, int, int);
template __global__ void int4_gemv_kernel<false>(const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                 const __nv_bfloat16*, float*, int, int, int);
"""

BINDINGS = r"""
#include <c10/cuda/CUDAStream.h>

static cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

static void check(cudaError_t err, const char* what) {
    TORCH_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}

void launch_empty(torch::Tensor t, int64_t n) {
    int* p = t.data_ptr<int>();
    cudaStream_t s = stream();
    for (int64_t i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, s>>>(p);
    check(cudaGetLastError(), "empty launch");
}

void launch_empty_coop(torch::Tensor t, int64_t n) {
    int* p = t.data_ptr<int>();
    void* args[] = {&p};
    cudaStream_t s = stream();
    for (int64_t i = 0; i < n; ++i)
        check(cudaLaunchCooperativeKernel((void*)empty_kernel, dim3(1), dim3(32), args, 0, s), "cooperative launch");
}

// How many blocks of a barrier kernel one SM holds at once: a grid of more than SMs times this hangs.
int64_t max_blocks_per_sm(bool cooperative, int64_t threads) {
    int blocks = 0;
    check(cooperative ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, coop_barriers_kernel, (int)threads, 0)
                      : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, soft_barriers_kernel, (int)threads, 0),
          "occupancy");
    return blocks;
}

// "" when launched, else the runtime's refusal (a grid larger than what fits at once).
std::string coop_barriers(int64_t n, int64_t blocks, int64_t threads) {
    int count = (int)n;
    void* args[] = {&count};
    cudaError_t err = cudaLaunchCooperativeKernel((void*)coop_barriers_kernel, dim3(blocks), dim3(threads), args, 0,
                                                  stream());
    if (err != cudaSuccess) { cudaGetLastError(); return cudaGetErrorString(err); }
    return "";
}

void soft_barriers(torch::Tensor counter, int64_t base, int64_t n, int64_t blocks, int64_t threads) {
    soft_barriers_kernel<<<blocks, threads, 0, stream()>>>(counter.data_ptr<int>(), (int)base, (int)n);
    check(cudaGetLastError(), "software barrier launch");
}

void globaltimer(torch::Tensor out) {
    globaltimer_kernel<<<1, 32, 0, stream()>>>(out.data_ptr<int64_t>(), (int)out.numel());
    check(cudaGetLastError(), "globaltimer launch");
}

void int4_gemv(torch::Tensor x, torch::Tensor wq, torch::Tensor scales, torch::Tensor zeros, torch::Tensor y,
               int64_t splits, bool stream_hint) {
    const int K = (int)x.numel(), N = (int)y.numel();
    TORCH_CHECK(K % 128 == 0 && N % 512 == 0 && (K / 128) % splits == 0, "sizes");
    dim3 grid(N / 512, (unsigned)splits);
    auto* xp = reinterpret_cast<const __nv_bfloat16*>(x.data_ptr());
    auto* sp = reinterpret_cast<const __nv_bfloat16*>(scales.data_ptr());
    auto* zp = reinterpret_cast<const __nv_bfloat16*>(zeros.data_ptr());
    const int gps = (K / 128) / (int)splits;
    if (stream_hint)
        int4_gemv_kernel<true><<<grid, 256, 0, stream()>>>(xp, wq.data_ptr<uint8_t>(), sp, zp, y.data_ptr<float>(), K, N, gps);
    else
        int4_gemv_kernel<false><<<grid, 256, 0, stream()>>>(xp, wq.data_ptr<uint8_t>(), sp, zp, y.data_ptr<float>(), K, N, gps);
    check(cudaGetLastError(), "int4 gemv launch");
}
"""

CUDA_SOURCE = KERNELS + BINDINGS

CPP_DECLARATIONS = """
void launch_empty(torch::Tensor t, int64_t n);
void launch_empty_coop(torch::Tensor t, int64_t n);
int64_t max_blocks_per_sm(bool cooperative, int64_t threads);
std::string coop_barriers(int64_t n, int64_t blocks, int64_t threads);
void soft_barriers(torch::Tensor counter, int64_t base, int64_t n, int64_t blocks, int64_t threads);
void globaltimer(torch::Tensor out);
void int4_gemv(torch::Tensor x, torch::Tensor wq, torch::Tensor scales, torch::Tensor zeros, torch::Tensor y,
               int64_t splits, bool stream_hint);
"""
FUNCTIONS = [
    "launch_empty",
    "launch_empty_coop",
    "max_blocks_per_sm",
    "coop_barriers",
    "soft_barriers",
    "globaltimer",
    "int4_gemv",
]


# -- figures from timings (pure, so that the CPU tests check them) -------------------------------
def per_barrier_us(kernel_ms_with: float, kernel_ms_without: float, barriers: int) -> float:
    return (kernel_ms_with - kernel_ms_without) / barriers * 1e3


def timer_resolution_ns(stamps: list[int]) -> dict[str, float]:
    """The least step of a clock read back to back, and how often it did not move."""
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    moved = [s for s in steps if s > 0]
    return {
        "least_step_ns": min(moved) if moved else 0.0,
        "median_step_ns": statistics.median(moved) if moved else 0.0,
        "unchanged_share": 1 - len(moved) / len(steps) if steps else 0.0,
    }


def median_of(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


# -- timing helpers (CUDA) ----------------------------------------------------------------------
def device_ms(run: Callable[[], Any]) -> float:
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    run()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end)


def host_us_per_launch(launch_many: Callable[[int], Any], count: int = LAUNCHES) -> dict[str, float]:
    """Wall time per launch, queued back to back: until the last is queued, and until it ran."""
    import torch

    queued, done = [], []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        started = time.perf_counter()
        launch_many(count)
        queued.append((time.perf_counter() - started) / count * 1e6)
        torch.cuda.synchronize()
        done.append((time.perf_counter() - started) / count * 1e6)
    return {"queued_us": statistics.median(queued), "completed_us": statistics.median(done)}


def environment() -> dict:
    import subprocess

    import torch

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- Triton ---------------------------------------------------------------------------------------
def triton_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def empty(x):
        pass

    @triton.jit
    def empty_many(p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11):
        pass

    @triton.jit(do_not_specialize=["base", "n"])
    def barriers(counter, base, n):
        n_programs = tl.num_programs(0)
        for i in range(n):
            tl.debug_barrier()
            tl.atomic_add(counter, 1, sem="release", scope="gpu")
            target = base + (i + 1) * n_programs
            seen = tl.load(counter, volatile=True)
            while seen < target:
                seen = tl.load(counter, volatile=True)
            tl.inline_asm_elementwise("fence.acq_rel.gpu;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
            tl.debug_barrier()

    return empty, empty_many, barriers


def measure_triton() -> dict:
    import torch

    empty, empty_many, barriers = triton_kernels()
    t = torch.zeros(16, dtype=torch.int32, device="cuda")
    many = [t] * 12 + list(range(3, 15))

    def launch_empty(n: int) -> None:
        for _ in range(n):
            empty[(1,)](t)

    def launch_many(n: int) -> None:
        for _ in range(n):
            empty_many[(1,)](*many)

    launch_empty(10)
    launch_many(10)
    torch.cuda.synchronize()
    result: dict[str, Any] = {
        "launch_1_arg": host_us_per_launch(launch_empty),
        "launch_24_args": host_us_per_launch(launch_many),
    }
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    compiled = barriers.warmup(counter, 0, 0, grid=(1,), num_warps=4)
    compiled._init_handles()
    per_sm = min(65536 // (-(-compiled.n_regs // 8) * 8 * 128), 16)
    result["barrier_kernel"] = {"registers": compiled.n_regs, "warps": 4, "co_resident_per_sm": per_sm}
    epoch = 0
    rows = {}
    for k in GRIDS_PER_SM:
        assert k <= per_sm, f"{k} programs per SM would not fit ({per_sm})"
        grid = sms * k

        def run(n: int) -> None:
            nonlocal epoch
            barriers[(grid,)](counter, epoch, n, num_warps=4)
            epoch += n * grid

        run(10)
        without = [device_ms(lambda: run(0)) for _ in range(REPEATS)]
        with_n = [device_ms(lambda: run(BARRIERS)) for _ in range(REPEATS)]
        rows[str(grid)] = {
            "us_per_barrier": per_barrier_us(statistics.median(with_n), statistics.median(without), BARRIERS),
            "kernel_without_barriers_us": statistics.median(without) * 1e3,
        }
    result["software_barrier"] = rows
    return result


# -- CUDA through load_inline -------------------------------------------------------------------------
def build_extension():
    """The extension, built for sm_90a (Hopper's own instructions) where this torch knows that
    architecture, else sm_90; and the seconds the build (or the cached build's load) took."""
    import os

    from torch.utils.cpp_extension import load_inline

    started = time.perf_counter()
    for arch in ("9.0a", "9.0"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        try:
            ext = load_inline(
                name="kagent_megakernel_probes",
                cpp_sources=CPP_DECLARATIONS,
                cuda_sources=CUDA_SOURCE,
                functions=FUNCTIONS,
                extra_cuda_cflags=["-O3"],
            )
            return ext, time.perf_counter() - started
        except ValueError as err:  # an architecture this torch does not know
            if arch == "9.0":
                raise
            print(f"TORCH_CUDA_ARCH_LIST={arch} refused ({err}); building for 9.0")


def measure_cuda() -> dict:
    import torch

    ext, build_s = build_extension()
    result: dict[str, Any] = {"build_s": build_s}
    t = torch.zeros(16, dtype=torch.int32, device="cuda")
    ext.launch_empty(t, 10)
    result["launch_loop_in_cpp"] = host_us_per_launch(lambda n: ext.launch_empty(t, n))
    result["cooperative_launch_loop_in_cpp"] = host_us_per_launch(lambda n: ext.launch_empty_coop(t, n))

    def from_python(n: int) -> None:
        for _ in range(n):
            ext.launch_empty(t, 1)

    result["launch_from_python_binding"] = host_us_per_launch(from_python)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    threads = 128
    per_sm = ext.max_blocks_per_sm(True, threads)
    soft_per_sm = ext.max_blocks_per_sm(False, threads)
    result["max_blocks_per_sm"] = {"grid.sync": per_sm, "software": soft_per_sm, "threads": threads}
    result["coop_refusal_of_a_grid_too_large"] = ext.coop_barriers(1, sms * per_sm + 1, threads)
    coop, soft = {}, {}
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    epoch = 0
    for k in GRIDS_PER_SM:
        assert k <= min(per_sm, soft_per_sm), f"{k} blocks per SM would not fit"
        blocks = sms * k

        def grid_sync(n: int) -> None:
            refused = ext.coop_barriers(n, blocks, threads)
            assert not refused, refused

        def software(n: int) -> None:
            nonlocal epoch
            ext.soft_barriers(counter, epoch, n, blocks, threads)
            epoch += n * blocks

        for _name, run, table in (("grid.sync", grid_sync, coop), ("software", software, soft)):
            run(10)
            without = [device_ms(lambda: run(0)) for _ in range(REPEATS)]
            with_n = [device_ms(lambda: run(BARRIERS)) for _ in range(REPEATS)]
            table[str(blocks)] = {
                "us_per_barrier": per_barrier_us(statistics.median(with_n), statistics.median(without), BARRIERS)
            }
    result["grid_sync_barrier"], result["software_barrier"] = coop, soft
    stamps = torch.zeros(4096, dtype=torch.int64, device="cuda")
    ext.globaltimer(stamps)
    torch.cuda.synchronize()
    result["globaltimer"] = timer_resolution_ns(stamps.cpu().tolist())
    result["int4_gemv"] = measure_gemv(ext)
    return result


def measure_gemv(ext) -> dict:
    import torch

    K, N = GEMV_K, GEMV_N
    gen = torch.Generator(device="cuda").manual_seed(0)
    copies = []
    for _ in range(GEMV_COPIES):
        wq = torch.randint(0, 256, (K // 2, N), dtype=torch.uint8, device="cuda", generator=gen)
        scales = (torch.rand(K // 128, N, device="cuda", generator=gen) * 0.01 + 0.001).to(torch.bfloat16)
        zeros = torch.randint(0, 16, (K // 128, N), device="cuda", generator=gen).to(torch.bfloat16)
        copies.append((wq, scales, zeros))
    x = (torch.randn(K, device="cuda", generator=gen) * 0.5).to(torch.bfloat16)
    y = torch.zeros(N, dtype=torch.float32, device="cuda")
    wq, scales, zeros = copies[0]
    # Exact dequantization, as the reference does it: w = (q - zero) * scale in float32.
    q = torch.stack((wq & 0xF, wq >> 4), dim=1).reshape(K, N).float()
    w = (q - zeros.float().repeat_interleave(128, 0)) * scales.float().repeat_interleave(128, 0)
    expected = x.float() @ w
    del q, w
    ext.int4_gemv(x, wq, scales, zeros, y, 4, True)
    torch.cuda.synchronize()
    relative_error = float((y - expected).norm() / expected.norm())
    nbytes = wq.numel() + 2 * scales.numel() * 2 + x.numel() * 2 + N * 4
    rows: dict[str, Any] = {"K": K, "N": N, "bytes": nbytes, "relative_error": relative_error}
    for splits in (1, 4):
        for hint in (False, True):
            times = []
            for i in range(30):
                wq, scales, zeros = copies[i % GEMV_COPIES]
                y.zero_()
                times.append(device_ms(lambda: ext.int4_gemv(x, wq, scales, zeros, y, splits, hint)))
            median_ms = statistics.median(times[3:])
            rows[f"splits_{splits}_{'evict_first' if hint else 'plain'}"] = {
                "us": median_ms * 1e3,
                "gb_per_s": nbytes / (median_ms / 1e3) / 1e9,
            }
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = statistics.median(device_ms(lambda: dst.copy_(src)) for _ in range(10))
    rows["copy_gb_per_s"] = 2 * src.numel() / (copy / 1e3) / 1e9
    return rows


def main(argv: list[str]) -> int:
    if argv[1] == "summary":  # summary TRITON.json CUDA.json
        parts = [json.loads(Path(p).read_text()) if Path(p).exists() else {} for p in argv[2:4]]
        print("\n".join(summary_lines(*parts)))
        return 0
    part, out = argv[1], Path(argv[2])
    figures = {"environment": environment(), part: measure_triton() if part == "triton" else measure_cuda()}
    out.write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures, indent=1))
    return 0


def summary_lines(triton_figures: dict, cuda_figures: dict) -> list[str]:
    """The figures the playbook cites, one line each, from the two parts' JSON (either may be {})."""
    lines = []
    tri, cu = triton_figures.get("triton") or {}, cuda_figures.get("cuda") or {}
    env = triton_figures.get("environment") or cuda_figures.get("environment") or {}
    if env:
        lines.append(f"{env.get('nvidia_smi')}; torch {env.get('torch')}, triton {env.get('triton')}, {env.get('utc')}")
    for name, table in (
        ("Triton software barrier", tri.get("software_barrier")),
        ("cooperative grid.sync (load_inline)", cu.get("grid_sync_barrier")),
        ("CUDA software barrier", cu.get("software_barrier")),
    ):
        if table:
            lines.append(
                f"{name}: " + ", ".join(f"{v['us_per_barrier']:.2f} µs at {grid} blocks" for grid, v in table.items())
            )
    for name, key, figures in (
        ("Triton launch, 1 argument", "launch_1_arg", tri),
        ("Triton launch, 24 arguments", "launch_24_args", tri),
        ("C++ launch in a loop (load_inline)", "launch_loop_in_cpp", cu),
        ("cooperative launch in a loop", "cooperative_launch_loop_in_cpp", cu),
        ("one load_inline call from Python", "launch_from_python_binding", cu),
    ):
        if key in figures:
            f = figures[key]
            lines.append(f"{name}: {f['queued_us']:.1f} µs queued, {f['completed_us']:.1f} µs completed per launch")
    if cu.get("coop_refusal_of_a_grid_too_large") is not None:
        lines.append(
            f"cooperative launch of SMs x {cu['max_blocks_per_sm']['grid.sync']} + 1 blocks: "
            f"{cu['coop_refusal_of_a_grid_too_large'] or 'launched (not refused)'}"
        )
    if "globaltimer" in cu:
        g = cu["globaltimer"]
        lines.append(
            f"%globaltimer read back to back: least step {g['least_step_ns']:.0f} ns, median step "
            f"{g['median_step_ns']:.0f} ns, unchanged {g['unchanged_share']:.0%} of reads"
        )
    gemv = cu.get("int4_gemv") or {}
    if gemv:
        variants = {k: v for k, v in gemv.items() if k.startswith("splits_")}
        best = max(variants, key=lambda k: variants[k]["gb_per_s"])
        lines.append(
            f"int4 GEMV {gemv['K']}x{gemv['N']} ({gemv['bytes'] / 1e6:.1f} MB, relative error "
            f"{gemv['relative_error']:.1e}): "
            + ", ".join(f"{k} {v['us']:.1f} µs = {v['gb_per_s']:.0f} GB/s" for k, v in variants.items())
            + f"; copy {gemv['copy_gb_per_s']:.0f} GB/s; best {best}"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv))
