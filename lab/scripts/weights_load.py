"""How long does the cache's weights file take to reach the GPU, alone and six at once? (issue 9)

A warm evaluation's processes (the referee, the baseline's, four reference workers) each load
the flagship's 1.07 GB reference weights from the cache at the same moment, and each took 3-4 s
on the H200 (2026-12-03, the lab notebook (lab/notebook/)). This script loads that file in N processes started
together, each way below, and prints each process's seconds:

- ``mmap``: as ``DiskCache.load`` does: ``torch.load(mmap=True)``, then each tensor ``.to(device)``;
- ``read``: ``torch.load`` reading the file into memory, then each tensor ``.to(device)``;
- ``pinned``: mapped as ``mmap``, each tensor copied into its slice of one pinned buffer,
  then to the device with ``non_blocking``, and one synchronize.

    python3 lab/scripts/weights_load.py FILE --device cuda --processes 1 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

WAYS = ("mmap", "read", "pinned")


def load(path: Path, way: str, device_name: str) -> float:
    import torch

    device = torch.device(device_name)
    if device.type == "cuda":
        torch.empty(1, device=device)  # the context first: not what is measured
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    if way == "mmap":
        value = {k: v.to(device) for k, v in torch.load(path, map_location="cpu", weights_only=True, mmap=True).items()}
    elif way == "read":
        value = {k: v.to(device) for k, v in torch.load(path, map_location="cpu", weights_only=True).items()}
    else:
        mapped = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        pinned = torch.empty(
            sum(v.nbytes for v in mapped.values()), dtype=torch.uint8, pin_memory=device.type == "cuda"
        )
        value, offset = {}, 0
        for k, v in mapped.items():
            staged = pinned[offset : offset + v.nbytes].view(v.dtype).view(v.shape)
            staged.copy_(v)
            offset += v.nbytes
            value[k] = staged.to(device, non_blocking=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    assert value
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 6])
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if not options.file.is_file():
        parser.error(f"no such file: {options.file}")
    if options.child:
        print(load(options.file, options.child, options.device), flush=True)
        return 0
    results = []
    for way in options.ways:
        for count in options.processes:
            children = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-I",
                        str(Path(__file__).resolve()),
                        str(options.file),
                        "--device",
                        options.device,
                        "--child",
                        way,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for _ in range(count)
            ]
            outputs = [child.communicate()[0] for child in children]
            if any(child.returncode for child in children):
                print(f"a process loading {options.file} the {way} way failed (its error above)", file=sys.stderr)
                return 1
            seconds = [float(out) for out in outputs]
            results.append({"way": way, "processes": count, "seconds": seconds})
            print(
                f"{way:>6}, {count} at once: median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s",
                flush=True,
            )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
