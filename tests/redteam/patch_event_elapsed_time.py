"""expect: pass
timed: score below 1.5

Makes every CUDA event interval read one microsecond (the class exists on the CPU too).

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""
torch.cuda.Event.elapsed_time = lambda self, end: 0.001
