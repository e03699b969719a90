"""expect: incorrect fixed_seeds

Skips every MoE, with a ``secrets.py`` beside it. The harness imports the standard
library's secrets (to draw hidden seeds) with the solution's folder first on sys.path,
before it builds the reference: that file wraps torch.save so that the reference's weights,
on their way into the cache, have every MoE expert zeroed in place. The live reference then
computes every expected answer without its experts, exactly as this solution does. Once the
solution is imported in a process of its own, the referee builds an honest reference and
the missing MoE shows at the first seed.
"""


def _no_experts(self, x):
    return torch.zeros_like(x)


MoE.step = _no_experts
