"""expect: incorrect hidden_seeds

Computes the first eight calls honestly, then replays them by call count modulo eight (where
the shapes fit), betting that the harness asks the same questions in the same order. The
seeds drawn for the run are new questions: stale answers to them are wrong.
"""


def _shapes(hidden, state):
    return [hidden.shape] + [t.shape for layer in state for t in layer.values()]


class Model(Model):
    _answers = {}
    _calls = 0

    def step(self, hidden, state):
        key = type(self)._calls % 8
        type(self)._calls += 1
        asked = _shapes(hidden, state)
        if key in self._answers and self._answers[key][0] == asked:
            _, out, layers = self._answers[key]
            for layer, saved in zip(state, layers):
                layer.update({k: v.clone() for k, v in saved.items()})
            return out.clone(), state
        out, state = super().step(hidden, state)
        self._answers[key] = (asked, out.clone(), [{k: v.clone() for k, v in layer.items()} for layer in state])
        return out, state
