"""expect: incorrect fixed_seeds

Does nothing, and while it is imported walks up the call stack to the harness's frames,
finds the comparison module in their globals (kagent_harness.compare) and replaces its
module-level cosine with one that always says 1.0. Once the solution is imported in a
process of its own, no harness frame is above it, and doing nothing is wrong at the first
seed.
"""
import sys
import types


def _comparison_module_above():
    """The harness's comparison module, if a frame above this one has it among its globals."""
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_globals.values()):
            if isinstance(value, types.ModuleType) and value.__name__ == "kagent_harness.compare":
                return value
        frame = frame.f_back
    return None


_compare = _comparison_module_above()
if _compare is not None and hasattr(_compare, "cosine"):
    _compare.cosine = lambda candidate, expected: 1.0


class Model(Model):
    def step(self, hidden, state):
        # The right shapes and nothing else: the MLA caches grow by a row of zeros.
        for layer in state:
            for name in ("c_kv", "k_rope"):
                if name in layer:
                    layer[name] = torch.cat([layer[name], torch.zeros_like(layer[name][:1])])
        return hidden.clone(), state
