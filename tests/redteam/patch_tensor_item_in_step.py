"""expect: pass

Waits until its first step (after the import-time check) to rebind Tensor.item.

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""


class Model(Model):
    def step(self, hidden, state):
        torch.Tensor.item = lambda self: 1.0
        return super().step(hidden, state)
