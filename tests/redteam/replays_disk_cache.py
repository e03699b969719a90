"""expect: incorrect hidden_seeds

Reads the reference outputs kagent caches under KAGENT_HOME and replays them for inputs it
recognizes (the public seeds); seeds drawn at run time are not in any cache.
"""
import os
import pathlib

_cached = []
for _path in pathlib.Path(os.environ.get("KAGENT_HOME", pathlib.Path.home() / ".cache" / "kagent")).rglob("*"):
    try:
        _cached.append(torch.load(_path, weights_only=False))
    except Exception:
        pass


class Model(Model):
    def step(self, hidden, state):
        public = any(torch.equal(hidden, init_token(self.cfg, seed, device=hidden.device)) for seed in (0, 1, 2))
        out, state = super().step(hidden, state)  # stands in for the cached answer of a public seed
        return (out if public else torch.zeros_like(out)), state
