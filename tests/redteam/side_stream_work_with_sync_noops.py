"""expect: incorrect hidden_work
timed
requires: cuda

Honest math, plus about 20 ms of matrix products that every step queues on a CUDA stream of
its own and never joins, after making torch.cuda.synchronize, Stream.synchronize and
Event.synchronize no-ops in its own process: whatever waits for the device through those
names returns at once, and the timer's events on the current stream never see the side
work. The referee's clock, synchronized around a block of chained steps, does.
"""
_SIDE_PRODUCTS = 12  # 8192 x 8192 bf16 products: about 1.7 ms each on an H100 or H200


def _returns_at_once(*args, **kwargs):
    return None


torch.cuda.synchronize = _returns_at_once
torch.cuda.Stream.synchronize = _returns_at_once
torch.cuda.Event.synchronize = _returns_at_once


class Model(Model):
    _side = None  # (stream, a, b, out), made on the first step on a CUDA device

    def step(self, hidden, state):
        out = super().step(hidden, state)
        if hidden.is_cuda:
            self._queue_side_work(hidden.device)
        return out

    def _queue_side_work(self, device):
        if self._side is None:
            a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
            b = a.t().contiguous()
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))  # a and b are written before they are read
            self._side = (stream, a, b, torch.empty_like(a))
        stream, a, b, product = self._side
        with torch.cuda.stream(stream):
            for _ in range(_SIDE_PRODUCTS):
                torch.mm(a, b, out=product)
