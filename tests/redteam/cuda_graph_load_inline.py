"""expect: forbidden cuda_graph

Captures a stream into a CUDA graph from C++ built at run time.
"""
from torch.utils.cpp_extension import load_inline

_SOURCE = """
// replay what was captured: cheaper than launching
void replay(long stream) {
    cudaGraph_t graph;
    cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeGlobal);
}
"""


def _build():
    return load_inline(name="replay", cpp_sources=[_SOURCE], functions=["replay"])
