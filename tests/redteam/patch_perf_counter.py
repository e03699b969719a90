"""expect: pass
timed: score below 1.5

Freezes the host clock, so a CPU timing would read every step as free.

It runs in the solution's own process, which holds none of what the referee measures or
judges with: the patch changes nothing there, and an honest step passes at its own speed.
"""
import time

time.perf_counter = lambda: 0.0
time.perf_counter_ns = lambda: 0
