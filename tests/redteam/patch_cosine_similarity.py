"""expect: pass

Makes every cosine similarity read 1.0.

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""
torch.nn.functional.cosine_similarity = lambda a, b, dim=1, eps=1e-8: torch.ones(())
