"""expect: tampered integrity torch.nn.functional.cosine_similarity

Makes every cosine similarity read 1.0.
"""
torch.nn.functional.cosine_similarity = lambda a, b, dim=1, eps=1e-8: torch.ones(())
