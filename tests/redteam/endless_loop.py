"""expect: timeout

Never returns from its first step.
"""


class Model(Model):
    def step(self, hidden, state):
        while True:
            pass
