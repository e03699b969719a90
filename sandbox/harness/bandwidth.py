"""The device's copy bandwidth, measured once and cached, for the bytes floor."""

from __future__ import annotations

import json
import os
import time

import torch

from . import lease
from .loading import DiskCache

CACHE_FILE = "bandwidth.json"


def _device_key(device: torch.device, environment: dict) -> str:
    if device.type == "cuda":
        return f"cuda:{environment.get('gpu_uuid') or environment.get('gpu_name')}"
    return f"cpu:{environment.get('hostname')}:{environment.get('cpu')}"


def _measure(device: torch.device) -> float:
    """Bytes per second of a large device-to-device copy, counting bytes read plus written."""
    nbytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.random_(0, 255)
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            dst.copy_(src)
            end.record()
            torch.cuda.synchronize(device)
            seconds = begin.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        if i >= 3:  # the first copies warm up the allocator and the clocks
            times.append(seconds)
    times.sort()
    return 2 * nbytes / times[len(times) // 2]


def copy_bandwidth(device: torch.device, environment: dict, cache: DiskCache) -> dict:
    """{"bytes_per_s", "measured_at", "cached"}; measured on first use per device, then cached."""
    key = _device_key(device, environment)
    found = cache.find(CACHE_FILE)
    table = {}
    if found is not None:
        try:
            table = json.loads(found.read_text())
        except (OSError, ValueError):
            table = {}
    if key in table:
        return {**table[key], "cached": True, "device_key": key}
    with lease.exclusive("bandwidth"):  # a copy timed beside other work reads low (harness/lease.py)
        measured = _measure(device)
    entry = {"bytes_per_s": measured, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = cache.writable(CACHE_FILE)
    if path:
        table[key] = entry
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, path)
    return {**entry, "cached": False, "device_key": key}
