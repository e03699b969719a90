"""A few chained steps of the megakernel on a GPU, for Nsight Compute (kagent's ncu_kernel tool):
random weights at full scale (bench.py's), one context. In a kagent workspace the task's files
sit in task/; in this repository bench.py finds them.

    python probe.py [--context 2048] [--steps 4]
    ncu_kernel: {"path": "probe.py", "kernel": "kimi_decode_step", "launch_skip": 2}
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "task"))
import bench  # noqa: E402  (it puts this folder and the repository's task on the path)

reference, shapes = bench.reference, bench.shapes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("probe.py launches the compiled kernel for Nsight Compute: it needs a CUDA device")
    device = torch.device("cuda")
    cfg = reference.build_config(shapes.SHAPES[0])
    model = bench.random_model(cfg, device)
    state = [{k: v.to(device) for k, v in layer.items()} for layer in reference.init_state(cfg, args.context, 0)]
    x = reference.init_token(cfg, 0).to(device)
    with torch.no_grad():
        for _ in range(args.steps):
            x, state = model.step(x, state)
    torch.cuda.synchronize(device)
    print(f"{args.steps} steps at ctx {args.context}: hidden finite {bool(torch.isfinite(x.float()).all())}")


if __name__ == "__main__":
    main()
