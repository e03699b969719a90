"""expect: incorrect fixed_seeds

Leaves the new row of the MLA rope cache empty.
"""


class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        state[3]["k_rope"][-1] = 0
        return out, state
