"""A KernelBench-style problem for the stage instruments (lab/scripts/gpu_megakernel.sh): the
sum of two large int32 streams, a (512 MB) and b (256 MB), as one int64. solution.py beside
it does it in one launch of two stages, one stream each, with a grid barrier after each:
about 0.2 ms on an H200, well above what a launch costs the host."""

import torch

# int32 words of each stream: 128 Mi (512 MB) and 64 Mi (256 MB) on CUDA; the CPU gets a
# two-thousandth of that, so that its test runs in seconds.
WORDS = (1 << 27, 1 << 26) if torch.cuda.is_available() else (1 << 16, 1 << 15)


class Model(torch.nn.Module):
    def forward(self, a, b):
        return a.sum(dtype=torch.int64) + b.sum(dtype=torch.int64)


def get_inputs():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return [torch.randint(-1000, 1000, (n,), dtype=torch.int32, device=device) for n in WORDS]


def get_init_inputs():
    return []
