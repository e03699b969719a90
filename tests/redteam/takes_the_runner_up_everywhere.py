"""expect: incorrect fixed_seeds does not match the reference that took the runner-up either

At every layer's routing, takes the first expert left out in place of the last one chosen:
the step a kernel computes where its rounding tips a tie, here at every step however far from
one. A mismatch is excused only within max_explained_margin of a tie, and only where the
reference that took the runner-up at that one layer matches; this one must fail.
"""


class Model(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for block in self.blocks:
            block.moe.take_runner_up = True
