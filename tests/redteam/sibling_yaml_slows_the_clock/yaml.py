"""Not PyYAML: stands in for it wherever ``import yaml`` finds this folder first.

Whoever imports it gets the installed PyYAML. On the way, time.perf_counter_ns and
time.perf_counter are replaced by a clock that falls behind true time by half of every
interval the harness times for the candidate; anywhere else it keeps true time.
"""
import importlib
import os
import sys
import time

_FOLDER = os.path.dirname(os.path.abspath(__file__))


def _installed_yaml():
    """PyYAML itself, imported from the path without this folder."""
    del sys.modules["yaml"]  # this module, half-imported: let the import find another
    path = list(sys.path)
    sys.path[:] = [entry for entry in path if os.path.abspath(entry or os.curdir) != _FOLDER]
    try:
        return importlib.import_module("yaml")
    finally:
        sys.path[:] = path


_true_ns = time.perf_counter_ns
_behind_ns = 0  # how far the clock has fallen behind true time
_interval_start_ns = None  # true time when the candidate's current interval began


def _timed_player(reader):
    """The name of the player whose interval ``reader`` (the harness frame that reads the
    clock) opens or closes: the timing loop holds the player in a local named ``p``."""
    loop = reader.f_back
    return getattr(loop.f_locals.get("p"), "name", None) if loop is not None else None


def _clock_ns(reader):
    global _behind_ns, _interval_start_ns
    now = _true_ns()
    if _timed_player(reader) == "candidate":
        if reader.f_code.co_name == "__init__":  # an interval opens
            _interval_start_ns = now
        elif reader.f_code.co_name == "close" and _interval_start_ns is not None:
            _behind_ns += (now - _interval_start_ns) // 2
            _interval_start_ns = None
    return now - _behind_ns


def perf_counter_ns():
    return _clock_ns(sys._getframe(1))


def perf_counter():
    return _clock_ns(sys._getframe(1)) / 1e9


time.perf_counter_ns = perf_counter_ns
time.perf_counter = perf_counter
sys.modules["yaml"] = _installed_yaml()
