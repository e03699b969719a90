"""Loading task and solution modules by path, and the on-disk caches that make a warm
evaluation fast (reference weights, reference outputs for the fixed seeds)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import mmap
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .regular_files import read_regular, regular_file


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


# The layout of an entry's record; a record of another format is not trusted. Format 2 holds a
# sha256 per RECORD_CHUNK_BYTES piece of the payload (format 1, one sha256 of the whole, took
# 1.25 s of every warm evaluation on an H200 machine for the flagship's 1.07 GB of weights,
# one running hash cannot be shared out; pieces can).
RECORD_FORMAT = 2
RECORD_CHUNK_BYTES = 64 << 20
HASH_CHUNK = 8 << 20
# Threads that hash a payload's pieces side by side (hashlib lets go of the GIL while it hashes).
HASH_THREADS = max(1, min(8, os.cpu_count() or 1))


def file_sha256(path: Path) -> str:
    """sha256 of the file, read in chunks: weight files reach a gigabyte."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def piece_sha256s(data: bytes | memoryview | mmap.mmap, piece_bytes: int) -> list[str]:
    """sha256 of each ``piece_bytes`` piece of ``data``, in order, hashed by threads side by side."""
    view = memoryview(data)
    pieces = [view[i : i + piece_bytes] for i in range(0, len(view), piece_bytes)] or [view[:0]]
    if len(pieces) == 1:
        return [hashlib.sha256(pieces[0]).hexdigest()]
    with ThreadPoolExecutor(min(HASH_THREADS, len(pieces))) as pool:
        return list(pool.map(lambda piece: hashlib.sha256(piece).hexdigest(), pieces))


def file_piece_sha256s(path: Path, piece_bytes: int) -> list[str]:
    """``piece_sha256s`` of a file's bytes, read through a memory map (pages straight from the
    page cache, no copy)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return piece_sha256s(b"", piece_bytes)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return piece_sha256s(mapped, piece_bytes)


class DiskCache:
    """Tensors saved under ``root/kind/key.pt`` with atomic writes; root None disables it.

    With ``staging``, ``root`` is only read: new entries go to ``staging``, and the agent side
    moves into ``root`` only what was staged before ``seal()``, which the harness calls just
    before any candidate code runs; after it nothing more is staged.

    Each entry has a record beside it, ``key.pt.json``: the format, the ``identity`` of what
    built it (the caller's digest of the task and harness files), the payload's size and the
    sha256 of each of its pieces (``piece_sha256s``). An entry is loaded only when its record
    vouches for it, for this identity (any, when identity is None); anything else, an entry of
    an older kagent (without a record, or with a record of another format) included, is a miss
    and gets rebuilt."""

    def __init__(self, root: Path | None, staging: Path | None = None, identity: str | None = None):
        self.root = Path(root) if root else None
        self.staging = Path(staging) if staging else None
        self.identity = identity
        self.sealed = False
        self.hits = 0
        self.misses = 0

    def find(self, name: str) -> Path | None:
        """The file ``name`` (relative to the cache), staged or cached, or None: a regular file
        reached through no link (regular_file), nothing else."""
        for folder in (self.staging, self.root):
            path = regular_file(folder, name) if folder is not None else None
            if path is not None:
                return path
        return None

    def writable(self, name: str) -> Path | None:
        """Where to write ``name`` now, or None when nothing may be written (no cache, or sealed)."""
        folder = self.staging or self.root
        if folder is None or self.sealed:
            return None
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        return folder / name

    def seal(self) -> dict[str, str]:
        """Stop writing; the sha256 of every staged file (payloads and their records), read back now."""
        self.sealed = True
        if self.staging is None or not self.staging.is_dir():
            return {}
        staged = [str(p.relative_to(self.staging)) for p in sorted(self.staging.rglob("*"))]
        return {name: file_sha256(self.staging / name) for name in staged if regular_file(self.staging, name)}

    def verified(self, path: Path, name: str) -> bool:
        """Whether the record beside ``path`` vouches for it: same format, entry and identity,
        and the payload's size and sha256 as recorded."""
        record = self._record(path, name)
        if record is None or record["bytes"] != path.stat().st_size:  # the size first: it spares a hash
            return False
        return record["piece_sha256"] == file_piece_sha256s(path, record["piece_bytes"])

    def _record(self, path: Path, name: str) -> dict | None:
        """The record beside ``path`` (a regular file, read through no link) where it is one of
        this format, for entry ``name`` and this identity; else None."""
        data = read_regular(path.parent, _record_path(path).name)
        try:
            record = json.loads(data) if data is not None else None
        except ValueError:
            return None
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("entry") != name:
            return None
        if self.identity is not None and record.get("identity") != self.identity:
            return None
        piece_bytes = record.get("piece_bytes")
        if not isinstance(record.get("bytes"), int) or not isinstance(piece_bytes, int) or piece_bytes <= 0:
            return None
        return record

    def entry(self, kind: str, key: str) -> Path | None:
        """The file of an entry its record vouches for (hashed now), or None."""
        name = f"{kind}/{key}.pt"
        path = self.find(name)
        return path if path is not None and self.verified(path, name) else None

    def load(self, kind: str, key: str, device: torch.device, path: Path | None = None) -> Any | None:
        """An entry's value on ``device``, or None (a miss); ``path``: the entry, verified
        already (``entry``)."""
        # Read once into this process's own memory, hashed there, and unpickled from those very
        # bytes: nothing the record does not vouch for is unpickled, and no value of the
        # referee's is a mapping of a file that anyone could rewrite or cut short later (the
        # staging folder is writable from the jail; a mapped file cut short kills its reader).
        name = f"{kind}/{key}.pt"
        path = path or self.find(name)
        record = self._record(path, name) if path is not None else None
        data = read_regular(path.parent, path.name) if path is not None and record is not None else None
        if (
            record is None
            or data is None
            or len(data) != record["bytes"]
            or piece_sha256s(data, record["piece_bytes"]) != record["piece_sha256"]
        ):
            self.misses += 1
            return None
        try:
            value = to_device(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True), device)
        except Exception:  # a payload that hashes right but does not load: rebuild it
            self.misses += 1
            return None
        self.hits += 1
        return value

    def store(self, kind: str, key: str, value: Any) -> None:
        name = f"{kind}/{key}.pt"
        path = self.writable(name)
        if path is None:
            return
        self._write(path, name, _serialized(value))

    def store_late(self, kind: str, key: str, value: Any) -> dict[str, str]:
        """Stage an entry after the seal, once no solution code can run any more (its process
        is gone): the sha256 of each file written, from the bytes written rather than read
        back, for a signed event of its own (the agent side promotes a file only where its
        hash matches, so nothing another process put there instead is kept)."""
        folder = self.staging or self.root
        if folder is None:
            return {}
        name = f"{kind}/{key}.pt"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        payload, record = self._write(folder / name, name, _serialized(value))
        return {name: hashlib.sha256(payload).hexdigest(), name + ".json": hashlib.sha256(record).hexdigest()}

    def _write(self, path: Path, name: str, payload: bytes) -> tuple[bytes, bytes]:
        """Write ``payload`` to ``path`` and its record beside it, each atomically; both as written."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(payload)
        record = json.dumps(
            {
                "format": RECORD_FORMAT,
                "entry": name,
                "identity": self.identity,
                "bytes": len(payload),
                "piece_bytes": RECORD_CHUNK_BYTES,
                "piece_sha256": piece_sha256s(payload, RECORD_CHUNK_BYTES),
            },
            indent=1,
        ).encode()
        os.replace(tmp, path)
        # The record last: until it lands, the payload has no record or one made for other
        # bytes, which does not verify, so a crash in between leaves nothing that is trusted.
        record_tmp = tmp.with_name(f".{path.name}.json.{os.getpid()}.tmp")
        record_tmp.write_bytes(record)
        os.replace(record_tmp, _record_path(path))
        return payload, record

    def get_or_build(self, kind: str, key: str, device: torch.device, build: Callable[[], Any]) -> Any:
        value = self.load(kind, key, device)
        if value is None:
            value = build()
            self.store(kind, key, to_cpu(value))
        return value


def _serialized(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _record_path(payload: Path) -> Path:
    """The record of an entry, beside its payload in the same folder (staged or cached)."""
    return payload.with_name(payload.name + ".json")


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
