"""expect: incorrect overwrite_in_place

Replays the answer stored under the input tensors' addresses.
"""


class Model(Model):
    _answers = {}

    def step(self, hidden, state):
        key = (hidden.data_ptr(), state[0]["S"].data_ptr())
        if key in self._answers:
            out, layers = self._answers[key]
            for layer, saved in zip(state, layers):
                layer.update(saved)
            return out.clone(), state
        out, state = super().step(hidden, state)
        self._answers[key] = (out.clone(), [dict(layer) for layer in state])
        return out, state
