"""expect: pass
timed: score below 1.5

Makes device synchronization a no-op, so work could run on past the timer.

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""
torch.cuda.synchronize = lambda device=None: None
