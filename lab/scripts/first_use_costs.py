"""What a first use costs in a fresh process, for the calls an evaluation's processes make once.

Each line runs in an interpreter of its own (a first use is only first once) and prints its
seconds and whether it imported the heavy module behind it:

- ``torch.nn.utils.skip_init`` (how the flagship reference built its plain linears until
  2026-12-03): imports sympy through ``Module.to_empty``;
- ``torch.profiler.profile`` (how launches were counted): its start imports Inductor;
- ``torch.autograd.profiler.profile`` (how they are counted now): neither.

    python3 lab/scripts/first_use_costs.py
"""

from __future__ import annotations

import subprocess
import sys

CASES = {
    "skip_init": ("sympy", "torch.nn.utils.skip_init(torch.nn.Linear, 2304, 512, bias=False, dtype=torch.bfloat16)"),
    "torch.profiler.profile": (
        "torch._inductor",
        "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):\n    torch.ones(3) + 1",
    ),
    "torch.autograd.profiler.profile": (
        "torch._inductor",
        "with torch.autograd.profiler.profile(use_kineto=True):\n    torch.ones(3) + 1",
    ),
}


def main() -> int:
    for name, (module, code) in CASES.items():
        program = (
            "import sys, time, torch\nimport torch.profiler\nstarted = time.perf_counter()\n"
            + code
            + f"\nprint(round(time.perf_counter() - started, 3), {module!r} in sys.modules)\n"
        )
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
        if done.returncode:
            print(f"{name}: failed\n{done.stderr}", file=sys.stderr)
            return 1
        seconds, imported = done.stdout.split()[-2:]
        print(f"{name}: first use {seconds} s; {module} imported by it: {imported == 'True'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
