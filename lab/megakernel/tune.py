"""Launch and layout options of the megakernel measured side by side on a GPU: for each
variant (warps a program, a register cap, any of the layout's constants, variables the solution
reads as it loads such as KIMI_LAUNCH, or another copy of megakernel.py such as the kernel
before a change, by its path), the plain chain
loop's milliseconds per step at each context (bench.py's loop), its ratio to the first
variant's in the same round, the compiled kernel's registers, spills and shared memory, and
its output against the first variant's from the same inputs (a variant that changes the
math shows it here before any evaluation).

    python lab/megakernel/tune.py --out tune.json \
        --variant '{"name": "now"}' --variant '{"name": "w16", "num_warps": 16, "maxnreg": 128}' \
        --variant '{"name": "bl64", "consts": {"BL": 64}}' \
        --variant '{"name": "direct", "env": {"KIMI_LAUNCH": "direct"}}' \
        --variant '{"name": "before", "kernel": "/tmp/megakernel_before.py"}'

Every variant is compiled first, in parallel processes sharing Triton's cache (a compile
takes over a minute), then timed in rounds, the order turned each round: measured once
each in a fixed order, two kernels swapped ranks when their order was swapped (H200,
2026-12-04: one read 1.5-2% faster measured second, 0-2% slower measured first).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench  # noqa: E402  (its random weights, loop and cosine; it puts the task on the path)
import megakernel as mk  # noqa: E402
import reference  # noqa: E402
import shapes  # noqa: E402
import solution  # noqa: E402

LAYOUT_OF = solution.Layout.of
KERNEL = mk.kimi_decode_step
COMPILE_TIMEOUT_S = 300   # one variant's compile and first step, in its own process
_KERNELS_BY_PATH: dict[str, object] = {}


class _Launcher:
    """A kernel with the megakernel's signature, launched with options added (those the
    solution does not pass). Anything else is the kernel's own (its signature and compiled
    kernels, which the solution's direct launch reads)."""

    def __init__(self, kernel, options: dict):
        self.kernel, self.options = kernel, options

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args, **kwargs: launch(*args, **kwargs, **self.options)

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)


def kernel_of(variant: dict):
    """The variant's kernel: this folder's, or the kimi_decode_step of the copy of megakernel.py
    that its "kernel" names (a path), loaded once as a module of its own. The solution launches
    it with the arguments it passes this folder's, so the copy must keep the kernel's signature."""
    path = variant.get("kernel")
    if not path:
        return KERNEL
    path = str(Path(path).resolve())
    if path not in _KERNELS_BY_PATH:
        spec = importlib.util.spec_from_file_location(f"megakernel_variant_{len(_KERNELS_BY_PATH)}", path)
        if not Path(path).is_file() or spec is None or spec.loader is None:
            raise SystemExit(f"tune.py: no kernel module at {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _KERNELS_BY_PATH[path] = module.kimi_decode_step
    return _KERNELS_BY_PATH[path]


_ENV_SET: set[str] = set()  # the variables the variant applied last set


def apply(variant: dict) -> None:
    """Make the solution module build and launch ``variant``: its "env" (variables the solution
    reads as it loads, e.g. KIMI_LAUNCH) replaces the previous variant's."""
    consts = variant.get("consts", {})
    for name in _ENV_SET - set(variant.get("env", {})):
        os.environ.pop(name, None)
    _ENV_SET.clear()
    for name, value in variant.get("env", {}).items():
        os.environ[name] = str(value)
        _ENV_SET.add(name)

    def layout_of(*args, **kwargs):
        layout = LAYOUT_OF(*args, **kwargs)
        unknown = set(consts) - set(layout.consts)
        if unknown:
            raise SystemExit(f"tune.py: the layout has no constant {sorted(unknown)}")
        layout.consts.update(consts)
        layout.check()
        return layout

    solution.Layout.of = staticmethod(layout_of)
    solution.NUM_WARPS = variant.get("num_warps", 8)
    options = {"maxnreg": variant["maxnreg"]} if variant.get("maxnreg") else {}
    mk.kimi_decode_step = _Launcher(kernel_of(variant), options)


def one_step(model, cfg, device, context: int):
    state = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, context, 5)]
    x = reference.init_token(cfg, 5).to(device)
    y, state = model.step(x, state)
    torch.cuda.synchronize(device)
    return y, state


def compile_only(variant: dict) -> None:
    apply(variant)
    device = torch.device("cuda")
    cfg = reference.build_config(shapes.SHAPES[0])
    model = bench.random_model(cfg, device)
    model.single_launch = True
    one_step(model, cfg, device, shapes.SHAPES[0]["context_len"])


def build(variant: dict, cfg, device, first: tuple | None) -> tuple[dict, object, tuple]:
    """The variant's model, its compiled kernel's figures and its first step against the
    first variant's."""
    apply(variant)
    model = bench.random_model(cfg, device)
    model.single_launch = True
    out = one_step(model, cfg, device, 2048)
    k = model.last_kernel
    row = {"variant": variant, "n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
           "shared_bytes": k.metadata.shared, "rounds": []}
    if first is not None:
        (y0, s0), (y1, s1) = first, out
        row["hidden_equal_to_first"] = bool(torch.equal(y0, y1))
        row["hidden_cos_to_first"] = bench.cosine(y0, y1)
        row["worst_state_cos_to_first"] = min(bench.cosine(a[n], b[n]) for a, b in zip(s0, s1) for n in a)
    return row, model, out


def summarize(rows: list[dict]) -> None:
    """Each variant's median over the rounds, and its ratio to the first variant measured in
    the same round (the pairing cancels what drifts between rounds: clocks, the host)."""
    first = rows[0]["rounds"]
    for row in rows:
        per_context = list(zip(*row["rounds"]))
        row["median_ms"] = [round(statistics.median(values), 4) for values in per_context]
        ratios = [[mine / theirs for mine, theirs in zip(r_mine, r_first)] for r_mine, r_first in zip(row["rounds"], first)]
        row["ratio_to_first"] = [round(statistics.median(values), 4) for values in zip(*ratios)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--variant", action="append", default=[], help="JSON: name, num_warps, maxnreg, consts, env, kernel")
    ap.add_argument("--steps", type=int, default=30, help="steps per timed chain")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over every variant, each in a turned order")
    ap.add_argument("--compile-only", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compile_only:
        compile_only(json.loads(args.compile_only))
        return
    if not torch.cuda.is_available():
        raise SystemExit("tune.py needs a CUDA device: it times the compiled kernel")
    if not args.variant or args.out is None:
        raise SystemExit("tune.py: give --out and at least one --variant")
    variants = [json.loads(v) for v in args.variant]
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    result = {"gpu": props.name, "uuid": str(getattr(props, "uuid", "")), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rows": [], "compiles": [], "rounds": args.rounds}

    def compile_in_child(variant: dict) -> dict:
        t0 = time.perf_counter()
        try:   # (the child also runs one step: a variant whose grid barrier never opens ends here)
            done = subprocess.run([sys.executable, __file__, "--compile-only", json.dumps(variant)],
                                  check=False, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"name": variant.get("name"), "rc": None, "s": round(time.perf_counter() - t0, 1),
                    "stderr_tail": f"no step within {COMPILE_TIMEOUT_S} s of starting to compile it"}
        return {"name": variant.get("name"), "rc": done.returncode, "s": round(time.perf_counter() - t0, 1),
                "stderr_tail": done.stderr[-2000:] if done.returncode else ""}

    with ThreadPoolExecutor(max_workers=min(len(variants), max(1, (os.cpu_count() or 2) // 2))) as pool:
        result["compiles"] = list(pool.map(compile_in_child, variants))
    print(json.dumps(result["compiles"], indent=1), flush=True)
    cfg = reference.build_config(shapes.SHAPES[0])
    first, built = None, []
    for variant, compiled in zip(variants, result["compiles"]):
        if compiled["rc"] != 0:
            result["failed"] = [*result.get("failed", []), {"variant": variant, "error": "did not compile or run"}]
            continue
        row, model, out = build(variant, cfg, device, first)
        first = first or out
        built.append((variant, model, row))
    # Rounds of every variant, the order turned each round (a variant measured first in a
    # round would otherwise always meet the GPU colder than the others).
    for r in range(args.rounds):
        order = built[r % len(built):] + built[:r % len(built)]
        for variant, model, row in (order if r % 2 == 0 else order[::-1]):
            apply(variant)
            row["rounds"].append([bench.chain_ms(model, cfg, device, s["context_len"], args.steps)["best_ms"]
                                  for s in shapes.SHAPES])
    result["rows"] = [row for _, _, row in built]
    if result["rows"]:
        summarize(result["rows"])
    args.out.write_text(json.dumps(result, indent=1))
    for row in result["rows"]:
        print(row["variant"].get("name"), "median ms", row["median_ms"], "ratio to first", row["ratio_to_first"],
              "regs", row["n_regs"], "spills", row["n_spills"], "hidden cos to first", row.get("hidden_cos_to_first"),
              "bitwise", row.get("hidden_equal_to_first"), "worst state cos", row.get("worst_state_cos_to_first"),
              flush=True)


if __name__ == "__main__":
    main()
