"""expect: tampered integrity baseline's Model.step

Finds the harness's baseline Model class among the live objects and slows its step down,
to inflate its own speedup.
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
