"""expect: pass

Writes every answer into one preallocated buffer and returns that same object each call.
"""


class Model(Model):
    _out = None

    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        if self._out is None:
            self._out = torch.empty_like(out)
        self._out.copy_(out)
        return self._out, state
