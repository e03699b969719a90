"""expect: pass
timed
launches: decide nothing

Rewrites, in its own process, the profiler's report of its launches: one launch, no graph,
no compile, a device time of a microsecond. The referee used to take that report as the
solution's count, even on a CPU where the baseline's read "not counted", and `kagent run`
ranked a single-launch attempt above every faster one. Now a count from the solution's own
process decides nothing: on a CPU it is not even asked for, and on CUDA it reaches the
result marked as not counted outside the solution, where the ledger ranks by it nothing and
no goal opens.
"""
import sys as _sys

_FORGED = {
    "launches": 1,
    "kernels": [{"name": "megakernel", "count": 1}],
    "distinct_kernels": 1,
    "single_launch": True,
    "cuda_graph_replay": False,
    "torch_compile": False,
    "device_ms": 0.001,
}


class Model(Model):
    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        # Built by the server of its own process: the server's module, up the stack, holds the
        # profiler's helpers; their report becomes whatever this says.
        frame = _sys._getframe(1)
        while frame is not None:
            helpers = frame.f_globals.get("launches")
            if helpers is not None and hasattr(helpers, "count_launches"):
                helpers.count_launches = lambda device, step: dict(_FORGED)
            frame = frame.f_back
