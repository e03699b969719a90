"""expect: incorrect fixed_seeds

Returns the KDA layers' short-convolution windows as they came in.
"""


class Model(Model):
    def step(self, hidden, state):
        old = [{k: layer[k].clone() for k in ("cq", "ck", "cv")} for layer in state[:3]]
        out, state = super().step(hidden, state)
        for layer, kept in zip(state[:3], old):
            layer.update(kept)
        return out, state
