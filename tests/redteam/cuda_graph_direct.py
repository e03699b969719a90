"""expect: forbidden cuda_graph

Captures the step once in a CUDA graph and replays it.
"""


class Model(Model):
    _graph = None

    def step(self, hidden, state):
        if self._graph is None and hidden.is_cuda:
            self._graph = torch.cuda.CUDAGraph()
        return super().step(hidden, state)
