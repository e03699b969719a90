"""Numerical comparison of a candidate's tensors against the reference's.

The functions used here are bound when this module is imported. The solution runs in a
process of its own and cannot rebind anything here; the binding keeps it so should that ever
change, and keeps the comparisons independent of names a later harness edit might shadow.
"""

from __future__ import annotations

import torch

_dot = torch.dot
_isfinite = torch.isfinite
_all = torch.all
_abs = torch.abs
_max = torch.max
_allclose = torch.allclose
_equal = torch.equal
_view = torch.Tensor.view
_contiguous = torch.Tensor.contiguous
_to = torch.Tensor.to
_reshape = torch.Tensor.reshape
_item = torch.Tensor.item
_sub = torch.sub
_sqrt = torch.sqrt
_mul = torch.mul
_sum = torch.sum
_tolist = torch.Tensor.tolist


def _flat64(t: torch.Tensor) -> torch.Tensor:
    return _reshape(_to(t, dtype=torch.float64), (-1,))


def is_finite(t: torch.Tensor) -> bool:
    return bool(_item(_all(_isfinite(t))))


def cosine(candidate: torch.Tensor, expected: torch.Tensor) -> float:
    """Cosine similarity in float64; two all-zero tensors count as identical."""
    a = _flat64(_to(candidate, device=expected.device))
    b = _flat64(expected)
    na = _item(_sqrt(_dot(a, a)))
    nb = _item(_sqrt(_dot(b, b)))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return _item(_dot(a, b)) / (na * nb)


def rows_finite(candidate: torch.Tensor) -> list[bool]:
    """Row by row (the first dimension): whether each row is finite; one transfer from the
    device for all rows (a fast kernel's timed chains record thousands of steps)."""
    return [bool(f) for f in _tolist(_all(_isfinite(_reshape(candidate, (candidate.shape[0], -1))), dim=1))]


def max_abs_diff(candidate: torch.Tensor, expected: torch.Tensor) -> float:
    a = _flat64(_to(candidate, device=expected.device))
    return _item(_max(_abs(_sub(a, _flat64(expected)))))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same dtype, shape and bytes (NaNs included, unlike ``==``)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(
        _equal(
            _view(_reshape(_contiguous(a), (-1,)), torch.uint8),
            _view(_reshape(_contiguous(_to(b, device=a.device)), (-1,)), torch.uint8),
        )
    )


def allclose(candidate: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    a = _to(candidate, device=expected.device, dtype=torch.float64)
    return bool(_allclose(a, _to(expected, dtype=torch.float64), atol=atol, rtol=rtol))


def tensor_problem(value: object, name: str, shape: tuple, dtype: torch.dtype, device: torch.device) -> str | None:
    """Why ``value`` is not a tensor of the expected shape, dtype and device (None if it is)."""
    if not isinstance(value, torch.Tensor):
        return f"{name}: expected a tensor, got {type(value).__name__}"
    if tuple(value.shape) != tuple(shape):
        return f"{name}: expected shape {tuple(shape)}, got {tuple(value.shape)}"
    if value.dtype != dtype:
        return f"{name}: expected dtype {dtype}, got {value.dtype}"
    if value.device.type != device.type:
        return f"{name}: expected a tensor on {device.type}, got one on {value.device.type}"
    return None
