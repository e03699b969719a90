"""expect: incorrect fixed_seeds

Returns a constant hidden (the state is right, so only the output gives it away).
"""


class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        return torch.full_like(out, 0.5), state
