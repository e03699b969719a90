"""expect: pass
timed: score below 1.5

Swaps torch.cuda.Event for a subclass whose intervals always read one microsecond.

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""


class _FastEvent(torch.cuda.Event):
    def elapsed_time(self, end_event):
        return 0.001


torch.cuda.Event = _FastEvent
