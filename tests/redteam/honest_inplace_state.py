"""expect: pass

Updates the fixed-size state tensors in place and returns the very dicts it was given.
"""


class Model(Model):
    def step(self, hidden, state):
        out, new_state = super().step(hidden, [dict(layer) for layer in state])
        for layer, new in zip(state, new_state):
            for name, tensor in new.items():
                if name in layer and layer[name].shape == tensor.shape:
                    layer[name].copy_(tensor)
                else:
                    layer[name] = tensor  # the MLA cache grows by a row: a new tensor
        return out, state
