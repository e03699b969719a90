"""expect: pass
timed: score below 1.5
requires: cuda

An honest solution that makes torch.cuda.Event.elapsed_time report a tenth of every
interval in its own process, where the harness, today, times it with those events. The
referee times the candidate with its own clock in a process the solution cannot reach: the
speedup is the honest one.
"""
_measured_elapsed_time = torch.cuda.Event.elapsed_time


def _a_tenth(self, end_event):
    return _measured_elapsed_time(self, end_event) / 10


torch.cuda.Event.elapsed_time = _a_tenth
