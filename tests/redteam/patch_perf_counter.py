"""expect: tampered integrity time.perf_counter

Freezes the host clock, so a CPU timing would read every step as free.
"""
import time

time.perf_counter = lambda: 0.0
time.perf_counter_ns = lambda: 0
