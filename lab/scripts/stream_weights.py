"""A fast kernel of kagent's own, to check the harness's timing against (issue 10).

One launch per decode step of the flagship that reads every int4 weight payload of the model
(1.07 GB at full scale: about 0.3 ms on an H200, the regime of the winning single-launch
kernels) and copies the hidden vector through. It computes nothing right, so no evaluation
would time it; lab/scripts/timing_truth.py times it through the harness's own timing code with
the checks left out, and compares with a plain loop, isolated steps and the profiler in one
process. It needs the flagship's reference beside it as ``kimi_reference.py`` (the script
puts it there). Without CUDA or Triton the same reads are one torch reduction: the CPU test
of the script runs that.
"""

from __future__ import annotations

import torch
from kimi_reference import Model as Reference

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU test's machine
    triton = None

# Words (int32) read per program of the stream kernel: 1024 lanes x 16 iterations.
LANES = 1024
ITERATIONS = 16

if triton is not None:

    @triton.jit
    def _stream(
        words,
        n_words,
        hidden_in,
        hidden_out,
        n_hidden,
        sink,
        LANES: tl.constexpr,
        ITERATIONS: tl.constexpr,
        HIDDEN_BLOCK: tl.constexpr,
    ):
        program = tl.program_id(0)
        total = tl.zeros([LANES], dtype=tl.int32)
        first = program * LANES * ITERATIONS
        for i in range(ITERATIONS):
            offsets = first + i * LANES + tl.arange(0, LANES)
            total += tl.load(words + offsets, mask=offsets < n_words, other=0)
        # The sum lands somewhere, so that no load can be dropped as dead.
        tl.atomic_add(sink, tl.sum(total, axis=0))
        if program == 0:
            h = tl.arange(0, HIDDEN_BLOCK)
            tl.store(hidden_out + h, tl.load(hidden_in + h, mask=h < n_hidden), mask=h < n_hidden)


class Model(Reference):
    """The reference's parameters (so the harness loads its weights as into any solution);
    a step that only streams them."""

    def __init__(self, cfg, init_weights: bool = False):
        # No random draws (17 s on the CPU at full scale): the harness loads the weights after.
        super().__init__(cfg, init_weights=init_weights)

    def _stream_words(self) -> torch.Tensor:
        words = self.__dict__.get("_words")
        if words is None:  # built at the first step: the harness loads the weights after construction
            payloads = [b.reshape(-1) for b in self.buffers() if b.dtype == torch.uint8]
            flat = torch.cat(payloads)
            flat = torch.cat([flat, flat.new_zeros(-flat.numel() % 4)])
            words = flat.view(torch.int32)
            self.__dict__["_words"] = words
            self.__dict__["_sink"] = torch.zeros(1, dtype=torch.int32, device=words.device)
        return words

    def step(self, hidden: torch.Tensor, state: list):
        words = self._stream_words()
        out = torch.empty_like(hidden)
        if hidden.is_cuda and triton is not None:
            n = words.numel()
            grid = (triton.cdiv(n, LANES * ITERATIONS),)
            _stream[grid](
                words,
                n,
                hidden,
                out,
                hidden.numel(),
                self.__dict__["_sink"],
                LANES=LANES,
                ITERATIONS=ITERATIONS,
                HIDDEN_BLOCK=triton.next_power_of_2(hidden.numel()),
            )
        else:
            self.__dict__["_sink"] += words.sum(dtype=torch.int32)
            out.copy_(hidden)
        return out, state
