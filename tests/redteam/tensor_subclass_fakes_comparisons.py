"""expect: error fixed_seeds must be a torch.Tensor, got _LooksRight

Does nothing, and returns its hidden and its state as a torch.Tensor subclass whose
``__torch_function__`` answers every comparison as if it matched the other operand: it
acts as the unit vector along whatever it is compared with (a dot product with x gives
|x|, its own norm is 1), its cosine similarity is 1, subtracting it from anything gives
zeros. The harness's comparisons, handed the subclass itself, see perfect cosines. The
solution's process hands the referee only plain tensors of exactly the expected type, and
refuses anything else as a bad return before a value is copied.
"""
import torch.nn.functional as _functional

_DOTS = {torch.dot, torch.Tensor.dot, torch.vdot, torch.Tensor.vdot, torch.inner, torch.Tensor.inner}
_NORMS = {torch.norm, torch.Tensor.norm, torch.linalg.norm, torch.linalg.vector_norm}
_DIFFERENCES = {torch.sub, torch.subtract, torch.Tensor.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__}
_CLOSENESS = {torch.allclose, torch.Tensor.allclose, torch.equal, torch.Tensor.equal}


class _LooksRight(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        operands = [a for a in args if isinstance(a, torch.Tensor)]
        plain = [a for a in operands if not isinstance(a, cls)]
        with torch._C.DisableTorchFunctionSubclass():
            if func in _DOTS:
                if not plain:
                    return torch.ones((), dtype=torch.float64, device=operands[0].device)
                other = plain[0].to(torch.float64).reshape(-1)
                return torch.sqrt(torch.dot(other, other))
            if func in _NORMS:
                return torch.ones((), dtype=torch.float64, device=operands[0].device)
            if func is _functional.cosine_similarity:
                return torch.ones_like(func(*args, **kwargs))
            if func in _CLOSENESS:
                return True
            if func in _DIFFERENCES and plain:
                return torch.zeros_like(func(*args, **kwargs)).as_subclass(cls)
        return super().__torch_function__(func, types, args, kwargs)


def _looks_right(tensor):
    return tensor.as_subclass(_LooksRight)


class Model(Model):
    def step(self, hidden, state):
        returned = []
        for layer in state:
            grown = dict(layer)
            for name in ("c_kv", "k_rope"):  # the MLA caches must still grow by a row
                if name in grown:
                    grown[name] = torch.cat([grown[name], torch.zeros_like(grown[name][:1])])
            returned.append({name: _looks_right(tensor) for name, tensor in grown.items()})
        return _looks_right(hidden.clone()), returned
