"""expect: pass
timed
requires: cuda
launches: decide nothing

forges_its_launch_count on the GPU, where the referee asks the solution's process for its
profile: the forged report of one launch and a microsecond of device time reaches the result,
marked as not counted outside the solution's process, so the ledger ranks no attempt by it,
the megakernel goal does not pass and `finish` does not open.
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
