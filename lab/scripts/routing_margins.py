"""Per-layer routing margins of the flagship reference, and whether the baseline agrees.

Usage: python lab/scripts/routing_margins.py FIRST_SEED END_SEED [CONTEXT]
Prints, per seed, each layer's relative gap between the 8th and 9th expert probability and
the cosine of the baseline's next hidden against the reference's (full-scale Config; builds
the reference weights first, about 14 s on a 2-core CPU).
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tasks" / "02_kimi_linear_decode"))
import baseline  # noqa: E402  (the task folder's own modules)
import reference  # noqa: E402


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def main() -> None:
    first, end = int(sys.argv[1]), int(sys.argv[2])
    context_len = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    cfg = reference.build_config({"n_experts": 64})
    started = time.time()
    ref = reference.Model(cfg)
    print(f"reference built in {time.time() - started:.1f} s", flush=True)
    fast = baseline.Model(cfg)
    fast.load_state_dict(ref.state_dict())
    for seed in range(first, end):
        state = reference.init_state(cfg, context_len, seed, "cpu")
        hidden = reference.init_token(cfg, seed, "cpu")

        def copy(state=state):
            return [{k: v.clone() for k, v in layer.items()} for layer in state]

        expected, _ = ref.step(hidden.clone(), copy())
        margins = [float(block.moe.last_margin) for block in ref.blocks]
        got, _ = fast.step(hidden.clone(), copy())
        print(seed, " ".join(f"{m:.4f}" for m in margins), f"cosine {cosine(expected, got):.5f}", flush=True)


if __name__ == "__main__":
    main()
