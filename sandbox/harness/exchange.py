"""How tensors and values cross between the referee and the solution's process.

The referee owns one shared byte arena: a file mapped by both processes on the CPU, one CUDA
allocation opened through CUDA IPC on the GPU. Everything that crosses (inputs, outputs, the
per-step record of a chain) is a *slot* of that arena: an offset, a dtype and a shape. The
messages themselves are JSON; a value travels as a tagged tree (see ``encode``), so neither
side ever unpickles what the other wrote.

Why one arena in an allocation of its own: a CUDA IPC handle opens the whole allocation it
points into. Tensors from PyTorch's caching allocator share allocations ("segments"), so a
handle to an ordinary tensor would let the solution's process read and write whatever the
referee keeps beside it (the reference's weights, the expected outputs). The arena is sized
so the caching allocator gives it a segment of its own and never splits it, and the referee
checks that before it shares it (``Arena.create``).

Standard library and torch only: the solution's process imports this module.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Slots start at multiples of this: enough for any dtype and for 16-byte vector loads.
ALIGN = 256
# PyTorch's caching allocator gives a request of 10 MiB or more a segment rounded up to
# 2 MiB, and splits off the rest only when it exceeds 1 MiB: a request that is itself a whole
# number of 2 MiB units above 10 MiB fills its segment exactly.
_SEGMENT_UNIT = 2 << 20
_MIN_DEDICATED_BYTES = 12 << 20

_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}


class ExchangeError(Exception):
    """A message or a slot that does not describe what it must (a protocol violation)."""


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise ExchangeError(f"dtype {dtype} cannot cross between the processes")
    return name


def dtype_of(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ExchangeError(f"unknown dtype {name!r}")
    return _DTYPES[name]


def slot_nbytes(slot: dict) -> int:
    count = 1
    for dim in slot["shape"]:
        count *= int(dim)
    return count * dtype_of(slot["dtype"]).itemsize


class Arena:
    """The shared bytes, and tensors that are views of them."""

    def __init__(self, buffer: torch.Tensor, description: dict, keep: Any = None):
        self.buffer = buffer  # uint8, one dimension
        self.description = description  # what the other process needs to map it
        self._keep = keep  # what must live as long as the arena: the CPU file's path, the CUDA pool

    @property
    def nbytes(self) -> int:
        return self.buffer.numel()

    @classmethod
    def create(cls, device: torch.device, nbytes: int, folder: Path) -> Arena:
        """A new arena of at least ``nbytes``; on CUDA in an allocation of its own."""
        if device.type == "cuda":
            size = max(_MIN_DEDICATED_BYTES, -(-nbytes // _SEGMENT_UNIT) * _SEGMENT_UNIT)
            # A private memory pool: nothing else the referee allocates can land in its
            # segments, whenever the arena is made.
            pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(pool, device=device):
                buffer = torch.zeros(size, dtype=torch.uint8, device=device)
            _check_dedicated(buffer)
            (dev, handle, storage_bytes, storage_offset, ref_handle, ref_offset, event_handle, event_sync) = (
                buffer.untyped_storage()._share_cuda_()
            )
            return cls(
                buffer,
                {
                    "kind": "cuda_ipc",
                    "device": dev,
                    "handle": handle.hex(),
                    "storage_bytes": storage_bytes,
                    "storage_offset": storage_offset,
                    "ref_counter_handle": ref_handle.hex(),
                    "ref_counter_offset": ref_offset,
                    "event_handle": (event_handle or b"").hex(),
                    "event_sync_required": bool(event_sync),
                    "nbytes": size,
                },
                keep=pool,
            )
        size = -(-nbytes // ALIGN) * ALIGN
        path = folder / "arena.bin"
        with open(path, "wb") as f:
            f.truncate(size)
        buffer = torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)
        return cls(buffer, {"kind": "file", "path": str(path), "nbytes": size}, keep=path)

    @classmethod
    def attach(cls, description: dict) -> Arena:
        """The arena the referee described, mapped into this process."""
        size = int(description["nbytes"])
        if description.get("kind") == "file":
            buffer = torch.from_file(description["path"], shared=True, size=size, dtype=torch.uint8)
            return cls(buffer, description)
        if description.get("kind") != "cuda_ipc":
            raise ExchangeError(f"unknown arena kind {description.get('kind')!r}")
        torch.cuda._lazy_init()
        storage = torch.UntypedStorage._new_shared_cuda(
            description["device"],
            bytes.fromhex(description["handle"]),
            description["storage_bytes"],
            description["storage_offset"],
            bytes.fromhex(description["ref_counter_handle"]),
            description["ref_counter_offset"],
            bytes.fromhex(description["event_handle"]),
            description["event_sync_required"],
        )
        buffer = torch.empty(0, dtype=torch.uint8, device=f"cuda:{description['device']}")
        buffer.set_(storage, 0, (size,), (1,))
        return cls(buffer, description)

    def view(self, slot: dict) -> torch.Tensor:
        """The tensor a slot names, as a view of the arena (bounds checked)."""
        offset, nbytes = int(slot["offset"]), slot_nbytes(slot)
        if offset < 0 or offset % ALIGN or offset + nbytes > self.nbytes:
            raise ExchangeError(f"slot at {offset} of {nbytes} bytes is outside the arena of {self.nbytes}")
        raw = self.buffer[offset : offset + nbytes]
        return raw.view(dtype_of(slot["dtype"])).view(tuple(int(d) for d in slot["shape"]))

    def unlink_file(self) -> None:
        """On the CPU, remove the arena's file once every process that needs it has mapped
        it: the mappings stay, and no process can open it by name any more."""
        if isinstance(self._keep, Path):
            try:
                os.unlink(self._keep)
            except OSError:
                pass

    close = unlink_file


def _check_dedicated(buffer: torch.Tensor) -> None:
    """Refuse to share an arena whose CUDA allocation holds anything else."""
    start = buffer.data_ptr()
    for segment in torch.cuda.memory_snapshot():
        base = segment["address"]
        if base <= start < base + segment["total_size"]:
            if base == start and segment["total_size"] == buffer.numel() and len(segment["blocks"]) == 1:
                return
            raise ExchangeError(
                f"the exchange arena shares a CUDA allocation of {segment['total_size']} bytes "
                f"with {len(segment['blocks']) - 1} other block(s): it must not be shared"
            )
    raise ExchangeError("the exchange arena's CUDA allocation was not found in the allocator's snapshot")


class SlotAllocator:
    """Hands out slots of an arena front to back; ``reset`` frees them all at once."""

    def __init__(self, arena: Arena):
        self.arena = arena
        self.used = 0

    def reset(self) -> None:
        self.used = 0

    def slot(self, shape: tuple[int, ...], dtype: torch.dtype) -> dict:
        slot = {"offset": self.used, "dtype": dtype_name(dtype), "shape": [int(d) for d in shape]}
        end = self.used + slot_nbytes(slot)
        if end > self.arena.nbytes:
            raise ExchangeError(
                f"the exchange arena of {self.arena.nbytes} bytes is too small for {end} bytes of slots"
            )
        self.used = -(-end // ALIGN) * ALIGN
        return slot


def bytes_needed(tree: Any) -> int:
    """What ``encode`` would take of an arena for ``tree`` (tensors, or (shape, dtype) pairs)."""
    if isinstance(tree, torch.Tensor):
        return -(-tree.numel() * tree.element_size() // ALIGN) * ALIGN + ALIGN
    if isinstance(tree, Layout):
        count = 1
        for dim in tree.shape:
            count *= dim
        return -(-count * tree.dtype.itemsize // ALIGN) * ALIGN + ALIGN
    if isinstance(tree, dict):
        return sum(bytes_needed(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(bytes_needed(v) for v in tree)
    return 0


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a tensor must be: the referee's description of an expected output."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Layout:
        return cls(tuple(tensor.shape), tensor.dtype)


# -- values as tagged JSON trees ------------------------------------------------------------
# {"t": slot} a tensor; {"l": [...]} a list; {"u": [...]} a tuple; {"d": {...}} a dict with
# string keys; {"v": x} a JSON scalar; {"dtype": name}; {"device": name}; {"dc": {...}} a
# dataclass instance, rebuilt on the other side as a dataclass with the same fields and values.


def encode(value: Any, put_tensor: Callable[[Any], dict]) -> dict:
    """``value`` as a tagged tree; ``put_tensor`` turns a tensor or a Layout into a slot."""
    if isinstance(value, (torch.Tensor, Layout)):
        return {"t": put_tensor(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"v": value}
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, list):
        return {"l": [encode(v, put_tensor) for v in value]}
    if isinstance(value, tuple):
        return {"u": [encode(v, put_tensor) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ExchangeError("only dicts with string keys can cross between the processes")
        return {"d": {k: encode(v, put_tensor) for k, v in value.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        return {
            "dc": {
                "name": type(value).__name__,
                "frozen": bool(params and params.frozen),
                "fields": {f.name: encode(getattr(value, f.name), put_tensor) for f in dataclasses.fields(value)},
            }
        }
    raise ExchangeError(f"a {type(value).__name__} cannot cross between the processes")


def _no_such_field(self: Any, name: str) -> Any:
    """A field the referee's dataclass does not have, read by the solution: an error that names
    it and the fields there are. The public board's harness hands a solution the task's own
    config (the public KernelBench-Mega ``Config`` has exactly its published fields), so code that
    reads anything else crashes there, and must fail here with the reason said."""
    if name.startswith("__"):  # copy, pickle and friends probe for optional hooks
        raise AttributeError(name)
    known = ", ".join(f.name for f in dataclasses.fields(self))
    raise AttributeError(
        f"{type(self).__name__} has no field {name!r}: the task's {type(self).__name__} has only {known} "
        f"(the public board's harness gives a solution exactly these)"
    )


def decode(node: Any, get_tensor: Callable[[dict], torch.Tensor]) -> Any:
    """The value a tagged tree describes; ``get_tensor`` turns a slot into a tensor."""
    if not isinstance(node, dict) or len(node) != 1:
        raise ExchangeError(f"not a tagged value: {str(node)[:80]}")
    ((tag, body),) = node.items()
    if tag == "t":
        return get_tensor(body)
    if tag == "v":
        if body is not None and not isinstance(body, (bool, int, float, str)):
            raise ExchangeError("a scalar must be a JSON scalar")
        return body
    if tag == "dtype":
        return dtype_of(body)
    if tag == "device":
        return torch.device(body)
    if tag == "l":
        return [decode(v, get_tensor) for v in body]
    if tag == "u":
        return tuple(decode(v, get_tensor) for v in body)
    if tag == "d":
        return {str(k): decode(v, get_tensor) for k, v in body.items()}
    if tag == "dc":
        fields = {k: decode(v, get_tensor) for k, v in body["fields"].items()}
        cls = dataclasses.make_dataclass(
            str(body["name"]),
            list(fields),
            frozen=bool(body["frozen"]),
            namespace={"__getattr__": _no_such_field},
        )
        return cls(**fields)
    raise ExchangeError(f"unknown tag {tag!r}")


def copy_tree(target: Any, source: Any) -> None:
    """Copy every tensor of ``source`` into the tensor at the same place in ``target``."""
    if isinstance(target, torch.Tensor):
        target.copy_(source)
    elif isinstance(target, dict):
        for key, value in target.items():
            copy_tree(value, source[key])
    elif isinstance(target, (list, tuple)):
        for mine, theirs in zip(target, source, strict=False):
            copy_tree(mine, theirs)


class BadReturn(Exception):
    """What the solution returned does not have the layout the referee expects."""


def fill(node: dict, value: Any, arena: Arena, where: str) -> None:
    """Copy ``value`` into the output slots ``node`` describes, checking that it has exactly
    the expected structure, and tensors of exactly ``torch.Tensor`` with the slot's dtype,
    shape and device; anything else is a ``BadReturn`` naming ``where`` it went wrong."""
    ((tag, body),) = node.items()
    if tag == "t":
        want_shape, want_dtype = tuple(body["shape"]), dtype_of(body["dtype"])
        if type(value) is not torch.Tensor:  # a subclass could answer comparisons its own way
            raise BadReturn(f"{where} must be a torch.Tensor, got {type(value).__name__}")
        if value.dtype != want_dtype or tuple(value.shape) != want_shape:
            raise BadReturn(
                f"{where} must be {dtype_name(want_dtype)} of shape {list(want_shape)}, got "
                f"{str(value.dtype).removeprefix('torch.')} of shape {list(value.shape)}"
            )
        target = arena.view(body)
        if value.device != target.device:
            raise BadReturn(f"{where} must be on {target.device}, got {value.device}")
        target.copy_(value)
        return
    if tag in ("l", "u"):
        if not isinstance(value, (list, tuple)) or len(value) != len(body):
            raise BadReturn(
                f"{where} must be a sequence of {len(body)}, got {type(value).__name__}"
                + (f" of {len(value)}" if isinstance(value, (list, tuple)) else "")
            )
        for i, (child, item) in enumerate(zip(body, value, strict=True)):
            fill(child, item, arena, f"{where}[{i}]")
        return
    if tag == "d":
        if not isinstance(value, dict) or set(value) != set(body):
            got = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
            raise BadReturn(f"{where} must have keys {sorted(body)}, got {got}")
        for key, child in body.items():
            fill(child, value[key], arena, f"{where}[{key!r}]")
        return
    raise ExchangeError(f"an expected output cannot be tagged {tag!r}")
