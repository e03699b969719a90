"""expect: forbidden torch_compile

Hands the step to torch.compile.
"""


class Model(Model):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.step = torch.compile(self.step)
