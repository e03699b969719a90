"""expect: tampered integrity torch.cuda.Event

Swaps torch.cuda.Event for a subclass whose intervals always read one microsecond.
"""


class _FastEvent(torch.cuda.Event):
    def elapsed_time(self, end_event):
        return 0.001


torch.cuda.Event = _FastEvent
