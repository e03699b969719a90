"""Steps of the megakernel against the task's reference, from the same state: the next
hidden, the last step's own contribution and every state tensor, by cosine (as kagent eval
compares them, without its isolation). Two steps by default, each side chained on its own
state: the first on the cache handed in (which the kernel copies into its own), the second
appending to the kernel's own cache in place, as a timed chain does. Exits 1 below
--min-cosine. A quick check of a change before a whole evaluation: on the CPU (Triton's
interpreter, smoke scale, about 5-20 s a step on this machine) or on a GPU.

    python examples/02_kimi_linear_decode/check.py [--scale smoke|full] [--context N] [--seeds 0,1] [--steps 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TASK = HERE.parents[1] / "tasks" / "02_kimi_linear_decode"
sys.path[:0] = [str(HERE), str(TASK)]

import reference  # noqa: E402  (the task's, for its Config, init_state and init_token)
import shapes  # noqa: E402
import solution  # noqa: E402


def clone_state(state):
    return [{k: v.clone() for k, v in layer.items()} for layer in state]


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().flatten(), b.detach().double().flatten()
    return float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))


def compare(ref_model, model, cfg, context: int, seed: int, salient: bool, device, steps: int = 2) -> dict:
    state = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, context, seed)]
    x = reference.init_token(cfg, seed).to(device)
    if salient:
        state = reference.salient_state(ref_model, x, state)
    want, want_state, got, got_state = x.clone(), clone_state(state), x.clone(), clone_state(state)
    seconds = 0.0
    for _ in range(steps):
        want_in, got_in = want, got
        with torch.no_grad():
            want, want_state = ref_model.step(want_in.clone(), want_state)
        t0 = time.perf_counter()
        got, got_state = model.step(got_in.clone(), got_state)
        seconds += time.perf_counter() - t0
    cos = {"hidden": cosine(want, got), "delta": cosine(want - want_in, got - got_in)}
    for i, (a, b) in enumerate(zip(want_state, got_state)):
        for name in a:
            if a[name].shape != b[name].shape:
                raise SystemExit(f"L{i}.{name}: shape {tuple(b[name].shape)}, the reference's {tuple(a[name].shape)}")
            cos[f"L{i}.{name}"] = cosine(a[name], b[name])
    mla = next(i for i, kind in enumerate(cfg.pattern) if kind == "M")
    for name in ("c_kv", "k_rope"):
        cos[f"L{mla}.{name}.appended"] = cosine(want_state[mla][name][-1], got_state[mla][name][-1])
    return {"context": context, "seed": seed, "salient": salient, "steps": steps, "seconds": seconds, "cosines": cos}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", choices=("smoke", "full"), default="smoke")
    ap.add_argument("--context", type=int, default=None, help="default: the scale's first shape")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--min-cosine", type=float, default=0.98)
    ap.add_argument("--steps", type=int, default=2, help="chained steps from each state (1: the copy's path only)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = (shapes.SMOKE_SHAPES if args.scale == "smoke" else shapes.SHAPES)[0]
    cfg = reference.build_config(shape)
    ref_model = reference.Model(cfg).to(device)
    model = solution.Model(cfg).to(device)
    model.load_state_dict(ref_model.state_dict(), strict=True)
    context = args.context or shape["context_len"]
    worst = 1.0
    for seed in (int(s) for s in args.seeds.split(",")):
        for salient in (False, True):
            row = compare(ref_model, model, cfg, context, seed, salient, device, args.steps)
            low = min(row["cosines"].items(), key=lambda kv: kv[1])
            worst = min(worst, low[1])
            print(f"ctx {context} seed {seed}{' salient' if salient else ''}, {args.steps} steps: "
                  f"{row['seconds']:.1f} s, "
                  f"hidden {row['cosines']['hidden']:.6f}, delta {row['cosines']['delta']:.6f}, "
                  f"worst {low[0]} {low[1]:.6f}", flush=True)
    if worst < args.min_cosine:
        print(f"FAIL: a cosine of {worst:.6f} is below {args.min_cosine}")
        sys.exit(1)
    print(f"ok: every cosine at least {worst:.6f}")


if __name__ == "__main__":
    main()
