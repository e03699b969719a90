"""expect: incorrect fixed_seeds

Does nothing, and imports ``fastmath``, a helper shipped as bytecode alone (the test builds
fastmath.pyc from fastmath.pyc.src): the static rules read source, so they never see that
the helper reaches into sys.modules for the harness's comparison module and makes every
cosine read 1.0. Once the solution is imported in a process of its own, there is no
comparison module to reach, and doing nothing is wrong at the first seed.
"""
import fastmath  # noqa: F401  (importing it is the whole point)


class Model(Model):
    def step(self, hidden, state):
        # The right shapes and nothing else: the MLA caches grow by a row of zeros.
        for layer in state:
            for name in ("c_kv", "k_rope"):
                if name in layer:
                    layer[name] = torch.cat([layer[name], torch.zeros_like(layer[name][:1])])
        return hidden.clone(), state
