"""expect: tampered integrity torch.cuda.synchronize

Makes device synchronization a no-op, so work could run on past the timer.
"""
torch.cuda.synchronize = lambda device=None: None
