"""A solution for 02_kimi_linear_decode whose Triton kernel deadlocks on its second launch, for
lab/scripts/gpu_watchdog.sh: what a frontier model's single-launch kernels ran into.

Each step launches one kernel per layer. The kernel ends its first stage at a grid barrier:
every block adds one to a counter, then waits until the counter equals the grid's size. The
counter is never reset, so the first launch passes (0 -> grid) and the second waits for a
count that has already gone by (grid -> 2 x grid, never grid again): every block spins on an
atomic load for ever, resident on its SM, moving no memory. The grid is one block per SM, so
the first launch's blocks are all co-resident and its barrier can complete.

It is not a correct solution and never gets that far: it keeps no weights (load_state_dict
keeps nothing) and returns its inputs, and its first step never returns.
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _double_then_barrier(x_ptr, out_ptr, counter_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)
    # The grid barrier: arrive, then poll until every block has arrived. The bug: the target
    # is the grid's size on every launch, while the counter carries over from the last one.
    tl.atomic_add(counter_ptr, 1, sem="release")
    arrived = tl.atomic_add(counter_ptr, 0, sem="acquire")
    while arrived != tl.num_programs(0):
        arrived = tl.atomic_add(counter_ptr, 0, sem="acquire")
    tl.store(out_ptr + offsets, tl.load(out_ptr + offsets, mask=mask) + 1, mask=mask)


class Model(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.counter = None

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return None  # keeps no weights: this solution never computes the step

    def step(self, hidden, state):
        device = hidden.device
        if self.counter is None:
            self.counter = torch.zeros(1, dtype=torch.int32, device=device)
        grid = (torch.cuda.get_device_properties(device).multi_processor_count,)
        x = hidden.contiguous()
        for _ in state:  # one launch per layer: the second one never ends
            out = torch.empty_like(x)
            _double_then_barrier[grid](x, out, self.counter, x.numel(), BLOCK=BLOCK, num_warps=4)
            x = out
        torch.cuda.synchronize(device)  # as a step that reads a result back would
        return hidden, state
