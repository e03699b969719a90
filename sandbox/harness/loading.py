"""Loading task and solution modules by path, and the on-disk caches that make a warm
evaluation fast (reference weights, reference outputs for the fixed seeds)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch


class CandidateError(Exception):
    """The candidate's code failed: raised, returned the wrong thing, or crashed the device.

    Carries a message for the model or user to act on; never a harness bug.
    """

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.message = message
        self.details = details


class TaskError(Exception):
    """The task or the job cannot be evaluated as asked (a missing scale, an unknown context,
    a reference that fails to load): the user's to fix, reported without a traceback."""


def candidate_call(what: str, fn: Callable[[], Any]) -> Any:
    """Run candidate code; any exception it raises becomes a CandidateError saying where."""
    try:
        return fn()
    except CandidateError:
        raise
    except (Exception, SystemExit) as exc:  # sys.exit() in candidate code is its failure too
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
        raise CandidateError(f"{what} raised {type(exc).__name__}: {str(exc)[:500]}", details) from exc


def load_module(name: str, path: Path) -> ModuleType:
    """Import the file at ``path`` as module ``name`` and register it in sys.modules."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            h.update(part.read_bytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


class DiskCache:
    """Tensors saved under ``root/kind/key.pt`` with atomic writes; root None disables it.

    With ``staging``, ``root`` is only read: new entries go to ``staging``, and the agent side
    moves into ``root`` only what was staged before ``seal()``, which the harness calls just
    before any candidate code runs; after it nothing more is staged."""

    def __init__(self, root: Path | None, staging: Path | None = None):
        self.root = Path(root) if root else None
        self.staging = Path(staging) if staging else None
        self.sealed = False
        self.hits = 0
        self.misses = 0

    def find(self, name: str) -> Path | None:
        """The file ``name`` (relative to the cache), staged or cached, or None."""
        for folder in (self.staging, self.root):
            if folder is not None and (folder / name).exists():
                return folder / name
        return None

    def writable(self, name: str) -> Path | None:
        """Where to write ``name`` now, or None when nothing may be written (no cache, or sealed)."""
        folder = self.staging or self.root
        if folder is None or self.sealed:
            return None
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        return folder / name

    def seal(self) -> dict[str, str]:
        """Stop writing; the sha256 of every staged file, read back now."""
        self.sealed = True
        if self.staging is None or not self.staging.is_dir():
            return {}
        return {str(p.relative_to(self.staging)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(self.staging.rglob("*")) if p.is_file()}

    def load(self, kind: str, key: str, device: torch.device) -> Any | None:
        path = self.find(f"{kind}/{key}.pt")
        if path is None:
            self.misses += 1
            return None
        try:
            # Memory-mapped: pages come straight from the page cache, then one copy each.
            value = to_device(torch.load(path, map_location="cpu", weights_only=True, mmap=True), device)
        except Exception:  # a torn or foreign file: rebuild it
            self.misses += 1
            return None
        self.hits += 1
        return value

    def store(self, kind: str, key: str, value: Any) -> None:
        path = self.writable(f"{kind}/{key}.pt")
        if path is None:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save(value, tmp)
        os.replace(tmp, path)

    def get_or_build(self, kind: str, key: str, device: torch.device, build: Callable[[], Any]) -> Any:
        value = self.load(kind, key, device)
        if value is None:
            value = build()
            self.store(kind, key, to_cpu(value))
        return value


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value
