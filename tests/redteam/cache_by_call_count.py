"""expect: incorrect overwrite_in_place

Computes the first eight calls honestly, then replays them by call count modulo eight,
betting that the harness asks the same questions in the same order.
"""


class Model(Model):
    _answers = {}
    _calls = 0

    def step(self, hidden, state):
        key = type(self)._calls % 8
        type(self)._calls += 1
        if key in self._answers and self._answers[key][0].shape == hidden.shape:
            out, layers = self._answers[key]
            for layer, saved in zip(state, layers):
                layer.update({k: v.clone() for k, v in saved.items()})
            return out.clone(), state
        out, state = super().step(hidden, state)
        self._answers[key] = (out.clone(), [{k: v.clone() for k, v in layer.items()} for layer in state])
        return out, state
