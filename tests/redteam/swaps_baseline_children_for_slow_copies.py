"""expect: pass
timed: score below 1.5

An honest solution that finds the baseline's live model among the live objects (a module
whose class comes from the module ``baseline``) and replaces every block's attention and
MoE children with copies (the same weights) of a subclass whose step sleeps 2 ms first.
The original children and their classes are left untouched, only detached. Once the
solution runs in a process of its own, no baseline model lives there: the speedup is the
honest one.
"""
import copy
import gc
import time


def _slow_copy(module):
    honest = type(module)

    def step(self, *args, **kwargs):
        time.sleep(0.002)
        return honest.step(self, *args, **kwargs)

    slow = copy.copy(module)  # shares the parameters, buffers and children of the original
    slow.__class__ = type(honest.__name__, (honest,), {"step": step})
    return slow


for _model in [obj for obj in gc.get_objects() if type(obj).__module__ == "baseline"
               and type(obj).__name__ == "Model" and isinstance(obj, torch.nn.Module)]:
    for _block in getattr(_model, "blocks", ()):
        for _child in ("attn", "moe"):
            if isinstance(getattr(_block, _child, None), torch.nn.Module):
                setattr(_block, _child, _slow_copy(getattr(_block, _child)))
