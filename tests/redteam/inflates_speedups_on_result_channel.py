"""expect: pass
timed: score below 1.5

An honest solution that finds the harness's result channel among the live objects (an
instance of a class named Channel) and wraps its send: every timing and score it sends
claims five times the measured speedup, and the channel signs the inflated line itself.
Once the solution runs in a process of its own, no Channel lives there: the speedup is the
honest one.
"""
import gc

_INFLATED = {"timing": ("speedup", "ci_low", "ci_high", "ratio_of_medians"), "score": ("geomean_speedup",)}


def _inflating(send):
    def inflated_send(event, *args, **fields):
        for name in _INFLATED.get(event, ()):
            if isinstance(fields.get(name), float):
                fields[name] *= 5
        return send(event, *args, **fields)

    return inflated_send


for _obj in gc.get_objects():
    if type(_obj).__name__ == "Channel" and callable(getattr(_obj, "send", None)):
        _obj.send = _inflating(_obj.send)
