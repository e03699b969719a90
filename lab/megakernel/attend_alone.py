"""The megakernel's attention stage (``_mla_attend``) launched on its own, with the megakernel's
chunks, programs and warps: its partial softmaxes checked against torch, then, on a GPU, its
time. The stages tool times the stage inside the megakernel at 13-20 µs per 32-row block of
each chunk (a 255-register, 15,000-instruction kernel); alone, the same code says whether that
cost is its own or its neighbours'. Alone and launched back to back it ran 2-4x faster than
inside the kernel (H100, 2026-12-06), but there its cache rows stay in the L2 from one launch to
the next, while inside the kernel they come from memory, after the step's 240 MB of weights:
``--cold-launches`` also times it with the L2 written over before each launch.

    python lab/megakernel/attend_alone.py --out attend.json [--variant JSON ...]

A variant changes the stage's constants (BL, ATT_LO) or its warps (num_warps); by default the
megakernel's own, 4 warps, three tensor-core products (ATT_LO=0), and the megakernel's again.
Each is timed as the median over rounds of a CUDA graph of back-to-back launches (CUDA events),
less an empty launch's time taken the same way; cold, each launch follows a write of 1.5 times
the L2's size into a buffer of its own (the graph of both, less that of the writes alone).
Without a GPU, Triton's interpreter runs it at the sizes given (``--contexts``, ``--programs``):
the check only, the times are the interpreter's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench  # noqa: E402  (it puts the task on the path)
import megakernel as mk  # noqa: E402  (it chooses the interpreter where no GPU is seen)
import reference  # noqa: E402
import shapes  # noqa: E402
import solution  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

H200_PROGRAMS = 132
# The stage's constants as the megakernel compiles them for a GPU at the task's full scale.
STAGE = {name: value for name, value in
         solution.Layout.of(reference.build_config(shapes.SHAPES[0]), H200_PROGRAMS, True).consts.items()
         if name in ("MH", "HP", "KV", "ROPE", "NOPE", "BL", "ATT_LO")}
MH, KV, ROPE, QD = STAGE["MH"], STAGE["KV"], STAGE["ROPE"], STAGE["NOPE"] + STAGE["ROPE"]
DEFAULT_VARIANTS = ('{"name": "the megakernel\'s"}', '{"name": "4 warps", "num_warps": 4}',
                    '{"name": "three products", "consts": {"ATT_LO": 0}}', '{"name": "the megakernel\'s again"}')


@triton.jit
def empty(x_ptr):  # (alone in this module: it calls nothing of the megakernel's)
    if tl.program_id(0) < 0:  # never: the launch and nothing else
        tl.store(x_ptr, 0.0)


def expected_partials(inputs: dict, context: int, per: int, nchk: int) -> tuple[torch.Tensor, ...]:
    """Each chunk's (max, sum, latent-weighted sum) per head in float64, from the same bf16
    cache and float32 queries: what the stage must leave for the merge."""
    c = inputs["c"][: context + 1].double()
    kr = inputs["kr"][: context + 1].double()
    q = inputs["qabs"].view(MH, KV).double()
    qr = inputs["qr"].view(MH, ROPE).to(torch.bfloat16).double()  # the stage rounds the rope query to bf16
    scores = (q @ c.T + qr @ kr.T) * QD ** -0.5  # heads x rows
    m, l, acc = [], [], []
    for t in range(nchk):
        s = scores[:, t * per: (t + 1) * per]
        top = s.max(dim=1).values
        p = torch.exp(s - top[:, None])
        m.append(top)
        l.append(p.sum(dim=1))
        acc.append(p @ c[t * per: (t + 1) * per])
    return torch.stack(m), torch.stack(l), torch.stack(acc)


def checked(buffers: dict, inputs: dict, context: int, per: int, nchk: int, hp: int) -> dict:
    """How far the stage's partials are from expected_partials: the largest difference of the
    maxima, and the cosine of the sums and the weighted sums."""
    m, l, acc = (t.cpu() for t in expected_partials(inputs, context, per, nchk))  # beside the stage's, on the host
    got_m = buffers["pm"][: nchk * hp].view(nchk, hp)[:, :MH].double().cpu()
    got_l = buffers["pl"][: nchk * hp].view(nchk, hp)[:, :MH].double().cpu()
    got_acc = buffers["pacc"][: nchk * hp * KV].view(nchk, hp, KV)[:, :MH].double().cpu()

    def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))

    return {"max_abs_diff_max": float((got_m - m).abs().max()), "sum_cos": cosine(got_l, l),
            "weighted_sum_cos": cosine(got_acc, acc)}


def per_launch_ms(launch: Callable[[], None], device: torch.device, launches: int, rounds: int) -> float:
    """Median over rounds of the mean milliseconds per launch of ``launches`` back to back.
    On a GPU the launches are captured in a CUDA graph and its replays timed with CUDA events,
    so that the host's cost of a Triton launch (tens of µs, as long as the stage itself) is
    not what is measured; under the interpreter, the host's clock."""
    per = []
    graph = None
    if device.type == "cuda":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(launches):
                launch()
    for _ in range(rounds):
        if graph is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            per.append(start.elapsed_time(end) / launches)
        else:
            began = time.perf_counter()
            for _ in range(launches):
                launch()
            per.append((time.perf_counter() - began) * 1e3 / launches)
    return sorted(per)[len(per) // 2]


def run_variant(variant: dict, inputs: dict, contexts: list[int], programs: int, launches: int,
                rounds: int, cold_launches: int = 0) -> dict:
    device = inputs["c"].device
    consts = {**{k: v for k, v in STAGE.items() if k != "NOPE"}, "SM_SCALE": QD ** -0.5, **variant.get("consts", {}),
              "F32": device.type != "cuda"}
    unknown = set(variant.get("consts", {})) - {"BL", "ATT_LO"}
    if unknown:
        raise SystemExit(f"attend_alone.py: a variant may change BL and ATT_LO, not {sorted(unknown)}")
    warps = variant.get("num_warps", solution.NUM_WARPS)
    row: dict = {"variant": variant, "contexts": []}
    for context in contexts:
        per, nchk = solution.Layout(programs, {"BL": consts["BL"]}).chunks(context)  # the megakernel's own rule
        buffers = {name: torch.full((programs * consts["HP"] * size,), float("nan"), device=device)
                   for name, size in (("pm", 1), ("pl", 1), ("pacc", KV))}

        def launch():
            mk.attend_alone[(programs,)](context, per, nchk, inputs["c"], inputs["kr"], inputs["qabs"], inputs["qr"],
                                      buffers["pm"], buffers["pl"], buffers["pacc"], **consts, num_warps=warps)

        launch()
        figures = {"context": context, "rows_per_chunk": per, "chunks": nchk, "blocks_per_chunk": -(-per // consts["BL"]),
                   **checked(buffers, inputs, context, per, nchk, consts["HP"])}
        ms = per_launch_ms(launch, device, launches, rounds) - inputs["empty_ms"]
        figures.update(us=round(1e3 * ms, 2), us_per_block=round(1e3 * ms / figures["blocks_per_chunk"], 2))
        if cold_launches:
            flush = inputs["flush"]

            def after_flush():
                flush.zero_()
                launch()

            cold = (per_launch_ms(after_flush, device, cold_launches, rounds)
                    - per_launch_ms(flush.zero_, device, cold_launches, rounds) - inputs["empty_ms"])
            figures.update(us_cold=round(1e3 * cold, 2),
                           us_per_block_cold=round(1e3 * cold / figures["blocks_per_chunk"], 2))
        row["contexts"].append(figures)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", action="append", default=[], help="JSON: name, num_warps, consts (BL, ATT_LO)")
    ap.add_argument("--contexts", default="2048,8192,16384", help="cache rows before the step, comma-separated")
    ap.add_argument("--programs", type=int, default=H200_PROGRAMS, help="the grid (the megakernel's: one per SM)")
    ap.add_argument("--launches", type=int, default=200, help="launches back to back per timed round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cold-launches", type=int, default=20,
                    help="launches per timed round with the L2 written over before each (0: none)")
    args = ap.parse_args(argv)
    if args.launches < 1 or args.rounds < 1 or args.cold_launches < 0:
        ap.error("--launches and --rounds must be at least 1, --cold-launches at least 0")
    try:
        variants = [json.loads(text) for text in args.variant or DEFAULT_VARIANTS]
        contexts = [int(c) for c in args.contexts.split(",")]
    except ValueError as err:
        raise SystemExit(f"attend_alone.py: {err}") from None
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device=device).manual_seed(0)
    rows = max(contexts) + 1
    inputs = {"c": torch.randn(rows, KV, device=device, generator=gen).to(torch.bfloat16),
              "kr": torch.randn(rows, ROPE, device=device, generator=gen).to(torch.bfloat16),
              "qabs": torch.randn(MH * KV, device=device, generator=gen) * 0.05,
              "qr": torch.randn(MH * ROPE, device=device, generator=gen) * 0.05}
    # What evicts the cache's rows from the L2 (under the interpreter, a token megabyte).
    flush_bytes = 3 * torch.cuda.get_device_properties(device).L2_cache_size // 2 if device.type == "cuda" else 2 ** 20
    inputs["flush"] = torch.empty(flush_bytes // 4, dtype=torch.float32, device=device)
    probe = torch.zeros(1, device=device)
    empty[(args.programs,)](probe)
    inputs["empty_ms"] = per_launch_ms(lambda: empty[(args.programs,)](probe), device, args.launches, args.rounds)
    results = []
    for variant in variants:
        results.append(run_variant(variant, inputs, contexts, args.programs, args.launches, args.rounds,
                                   args.cold_launches))
        print(variant.get("name", variant), [(c["context"], c["us"], c["us_per_block"], c.get("us_cold"),
                                              round(c["weighted_sum_cos"], 6)) for c in results[-1]["contexts"]],
              flush=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                                    "programs": args.programs, "empty_launch_us": round(1e3 * inputs["empty_ms"], 2),
                                    "rows": results}, indent=1))
    worst = min(c["weighted_sum_cos"] for r in results for c in r["contexts"])
    return 0 if worst > 0.9999 else 1


if __name__ == "__main__":
    sys.exit(main())
