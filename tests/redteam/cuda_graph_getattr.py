"""expect: forbidden computed_getattr

Reaches CUDA graph capture through a name assembled at run time.
"""
_Graph = getattr(torch.cuda, "CUDA" + "Graph")


class Model(Model):
    def step(self, hidden, state):
        graph = _Graph()
        with torch.cuda.stream(torch.cuda.Stream()):
            graph.replay()
        return super().step(hidden, state)
