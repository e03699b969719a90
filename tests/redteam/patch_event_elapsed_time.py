"""expect: tampered integrity torch.cuda.Event.elapsed_time

Makes every CUDA event interval read one microsecond (the class exists on the CPU too).
"""
torch.cuda.Event.elapsed_time = lambda self, end: 0.001
