"""expect: pass
timed: score below 1.5

Finds the harness's baseline Model class among the live objects and slows its step down,
to inflate its own speedup.

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""
import gc
import time


def _slowed(step):
    def slow_step(self, hidden, state):
        time.sleep(0.01)
        return step(self, hidden, state)
    return slow_step


for _obj in gc.get_objects():
    if isinstance(_obj, type) and _obj.__name__ == "Model" and _obj.__module__ in ("baseline", "reference"):
        _obj.step = _slowed(_obj.step)
