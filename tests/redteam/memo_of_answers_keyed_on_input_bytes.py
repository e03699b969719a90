"""expect: pass
timed: score below 1.5

Keeps every answer it computes under a hash of its inputs' bytes (the hidden and every state
tensor), and answers an input it has seen before from that memo, doing no work. Against a
referee whose timed chains repeated the validated chain from the public timing seed, every
timed step was a hit (9.2x and 12.1x with no work done). Each timed chain now starts from
inputs drawn for it when its request is staged, so the memo never answers a timed step: the
solution does the work and scores its honest speed.
"""

import hashlib


def _key(hidden, state):
    digest = hashlib.sha256()
    for tensor in [hidden, *(t for layer in state for t in layer.values())]:
        digest.update(str((tuple(tensor.shape), tensor.dtype)).encode())
        digest.update(tensor.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


class Model(Model):
    _memo = {}

    def step(self, hidden, state):
        key = _key(hidden, state)
        if key in self._memo:
            out, answer = self._memo[key]
            return out.clone(), [{name: t.clone() for name, t in layer.items()} for layer in answer]
        out, state = super().step(hidden, state)
        self._memo[key] = (out.clone(), [{name: t.clone() for name, t in layer.items()} for layer in state])
        return out, state
