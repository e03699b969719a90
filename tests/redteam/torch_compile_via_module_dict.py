"""expect: forbidden torch_compile

Takes torch.compile out of the torch module's namespace dict, ``torch.__dict__["compile"]``,
where no attribute named compile appears, and compiles its RMSNorm with it.
"""
_compile = torch.__dict__["compile"]
Block.norm = staticmethod(_compile(rmsnorm, backend="eager"))
