"""GPU figures of the megakernel outside kagent's harness (kagent eval gives the verdict):

- the single launch and the stage-by-stage launches agree on the same inputs (the grid
  barrier and what each stage reads after it, checked without the reference);
- a plain chain loop's milliseconds per step at each context, timed with CUDA events;
- kernel launches per step, from torch.profiler;
- the compiled kernel's registers, spills and shared memory.

The weights are random int4 with the task's statistics (timing does not depend on their
values, and building the reference's takes a CPU minute). Writes JSON to --out.

    python lab/megakernel/bench.py --out bench.json [--stage-launches-only] [--recording]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TASK = HERE.parents[1] / "tasks" / "02_kimi_linear_decode"
# The kernel itself is the example's (examples/02_kimi_linear_decode/); this folder holds the
# lab's tools around it.
KERNEL = HERE.parents[1] / "examples" / "02_kimi_linear_decode"
sys.path[:0] = [str(HERE), str(KERNEL), str(TASK)]

import reference  # noqa: E402  (the task's, for its Config, init_state and init_token)
import shapes  # noqa: E402
import solution  # noqa: E402
from check import clone_state, cosine  # noqa: E402, F401  (the example's, which tune.py uses through bench)
from roofline import bytes_per_step  # noqa: E402


@torch.no_grad()
def random_model(cfg, device: torch.device) -> solution.Model:
    """The solution's model with random weights drawn on the device, then repacked."""
    model = solution.Model(cfg).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name.endswith("w_q"):
            t.copy_(torch.randint(0, 256, t.shape, generator=gen, device=device, dtype=torch.int32).to(torch.uint8))
        elif name.endswith("scales"):
            t.copy_(0.02 * 6 / 15 * (0.8 + 0.4 * torch.rand(t.shape, generator=gen, device=device)))
        elif name.endswith("zeros"):
            t.copy_(torch.randint(5, 11, t.shape, generator=gen, device=device).float())
        elif name.endswith("norm"):
            t.fill_(1.0)
        elif name.endswith("conv_w"):
            t.copy_(0.1 * torch.randn(t.shape, generator=gen, device=device))
        else:  # router, beta_proj
            t.copy_(0.02 * torch.randn(t.shape, generator=gen, device=device))
    model.pack()
    return model


def agreement(model, cfg, device, context: int) -> dict:
    """One step launched whole and one launched stage by stage, from the same inputs."""
    state = reference.init_state(cfg, context, 5)
    state = [{k: v.to(device) for k, v in layer.items()} for layer in state]
    x = reference.init_token(cfg, 5).to(device)
    outs = {}
    for single in (False, True):
        model.single_launch = single
        model._cache = None
        y, st = model.step(x.clone(), clone_state(state))
        torch.cuda.synchronize(device)
        outs[single] = (y, st)
    (y0, s0), (y1, s1) = outs[False], outs[True]
    report = {"context": context, "hidden_equal": bool(torch.equal(y0, y1)), "hidden_cos": cosine(y0, y1),
              "finite": bool(torch.isfinite(y1.float()).all())}
    worst = min((cosine(a[k], b[k]), f"L{i}.{k}") for i, (a, b) in enumerate(zip(s0, s1)) for k in a)
    report["state_equal"] = all(torch.equal(a[k], b[k]) for a, b in zip(s0, s1) for k in a)
    report["worst_state"] = {"name": worst[1], "cos": worst[0]}
    return report


def launch_agreement(model, cfg, device, context: int, steps: int = 6) -> dict:
    """Chained steps launched directly (KIMI_LAUNCH=direct) against the same steps through
    Triton's dispatch, from the same inputs: the same compiled kernel must give the same bits;
    and how many of the direct launcher's steps skipped the dispatch."""
    direct = model.direct
    state0 = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, context, 7)]
    x0 = reference.init_token(cfg, 7).to(device)
    outs = []
    for launcher in (None, direct):
        model.direct, model._cache = launcher, None
        x, state = x0.clone(), clone_state(state0)
        for _ in range(steps):
            x, state = model.step(x, state)
        torch.cuda.synchronize(device)
        outs.append((x, state))
    model.direct = direct
    (y0, s0), (y1, s1) = outs
    return {"context": context, "steps": steps, "hidden_equal": bool(torch.equal(y0, y1)),
            "state_equal": all(torch.equal(a[k], b[k]) for a, b in zip(s0, s1) for k in a),
            "dispatches": direct.dispatches, "direct_launches": direct.direct_launches}


def chain_ms(model, cfg, device, context: int, steps: int, warmup: int = 3, record: bool = False) -> dict:
    """A plain loop of chained steps (each output fed back in), timed with CUDA events. With
    ``record``, each step's hidden is also copied into a buffer, as kagent's harness does in a
    timed chain (solution_server.op_chain): what that copy costs between two launches."""
    state = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, context, 0)]
    x = reference.init_token(cfg, 0).to(device)
    for _ in range(warmup):
        x, state = model.step(x, state)
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    recorded = torch.empty((steps, *x.shape), dtype=x.dtype, device=device) if record else None
    runs = []
    for _ in range(3):
        begin.record()
        for i in range(steps):
            x, state = model.step(x, state)
            if recorded is not None:
                recorded[i].copy_(x)
        end.record()
        end.synchronize()
        runs.append(begin.elapsed_time(end) / steps)
    wall0 = time.perf_counter()
    for _ in range(steps):
        x, state = model.step(x, state)
    # Until here only the host worked (a queue of 30 launches never fills): its time per step,
    # which a step's device time must exceed for the loop to be the GPU's time.
    enqueue_ms = (time.perf_counter() - wall0) * 1e3 / steps
    torch.cuda.synchronize(device)
    host_ms = (time.perf_counter() - wall0) * 1e3 / steps
    floor_us = bytes_per_step(cfg, context) / 4.27e12 * 1e6
    best = min(runs)
    return {"context": context, "steps": steps, "ms_per_step": runs, "best_ms": best, "host_wall_ms": host_ms,
            "host_enqueue_ms": enqueue_ms,
            "floor_us_at_4.27TBps": floor_us, "fraction_of_floor": floor_us / (best * 1e3),
            "finite": bool(torch.isfinite(x.float()).all())}


def host_profile(model, cfg, device, context: int, steps: int = 200, top: int = 15) -> dict:
    """Where the host's time a step goes (cProfile over chained steps, the queue never full):
    the functions with the most time of their own, in us a step. The profiler adds its own
    cost to each Python call, so the figures are for ranking, not for adding up."""
    import cProfile
    import pstats

    state = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, context, 0)]
    x = reference.init_token(cfg, 0).to(device)
    for _ in range(3):
        x, state = model.step(x, state)
    torch.cuda.synchronize(device)
    profiler = cProfile.Profile()
    wall0 = time.perf_counter()
    profiler.enable()
    for _ in range(steps):
        x, state = model.step(x, state)
    profiler.disable()
    enqueue_ms = (time.perf_counter() - wall0) * 1e3 / steps
    torch.cuda.synchronize(device)
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (primitive calls, calls, own, cumulative, callers)
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    return {"context": context, "steps": steps, "host_enqueue_ms_profiled": enqueue_ms,
            "functions": [{"function": f"{Path(f).name}:{line}({name})", "calls_a_step": calls / steps,
                           "own_us_a_step": own / steps * 1e6, "cumulative_us_a_step": cum / steps * 1e6}
                          for (f, line, name), (_, calls, own, cum, _) in rows]}


def launches(model, cfg, device, context: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    state = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, context, 0)]
    x = reference.init_token(cfg, 0).to(device)
    x, state = model.step(x, state)
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model.step(x, state)
        torch.cuda.synchronize(device)
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"launches": len(gpu), "names": sorted({e.name[:80] for e in gpu}),
            "device_us": sum(e.time_range.elapsed_us() for e in gpu)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stage-launches-only", action="store_true", help="skip the single launch (it hung before)")
    ap.add_argument("--recording", action="store_true",
                    help="also the plain loop with each step's hidden recorded, as the harness's timed chains do")
    ap.add_argument("--host-profile", action="store_true",
                    help="also where the host's time a single-launch step goes (cProfile, ctx 2048)")
    args = ap.parse_args()
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    result = {"gpu": props.name, "uuid": str(getattr(props, "uuid", "")), "sms": props.multi_processor_count,
              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    import triton
    result["triton"] = triton.__version__
    cfg = reference.build_config(shapes.SHAPES[0])

    def save():
        args.out.write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1), flush=True)

    t0 = time.perf_counter()
    model = random_model(cfg, device)
    result["build_s"] = time.perf_counter() - t0
    modes = [False] if args.stage_launches_only else [True]
    if not args.stage_launches_only:
        t0 = time.perf_counter()
        result["agreement"] = [agreement(model, cfg, device, 2048)]
        result["first_steps_s (compiles)"] = time.perf_counter() - t0
        result["launch"] = "direct" if model.direct is not None else "jit"
        if model.direct is not None:
            result["launch_agreement"] = launch_agreement(model, cfg, device, 2048)
        k = model.last_kernel
        result["kernel"] = {"n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
                            "shared_bytes": k.metadata.shared, "programs": model.layout.programs,
                            "stages": len(model.plan_rows), "barriers": len(model.plan_rows) - 1}
        save()
    for single in modes:
        model.single_launch = single
        key = "single_launch" if single else "stage_launches"
        result[key] = {"chain": [chain_ms(model, cfg, device, s["context_len"], 30) for s in shapes.SHAPES]}
        result[key]["profile"] = launches(model, cfg, device, 2048)
        if single and model.direct is not None:  # the steps so far, by how they were launched
            result[key]["direct"] = {"dispatches": model.direct.dispatches,
                                     "direct_launches": model.direct.direct_launches}
        if single and args.host_profile:
            result[key]["host_profile"] = host_profile(model, cfg, device, 2048)
        if args.recording:
            result[key]["chain_recording"] = [chain_ms(model, cfg, device, s["context_len"], 30, record=True)
                                              for s in shapes.SHAPES]
        save()


if __name__ == "__main__":
    main()
