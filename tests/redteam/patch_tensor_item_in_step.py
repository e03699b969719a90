"""expect: tampered integrity torch.Tensor.item

Waits until its first step (after the import-time check) to rebind Tensor.item.
"""


class Model(Model):
    def step(self, hidden, state):
        torch.Tensor.item = lambda self: 1.0
        return super().step(hidden, state)
