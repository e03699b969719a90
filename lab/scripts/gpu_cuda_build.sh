#!/usr/bin/env bash
# The agent's main path through the jail on a GPU machine: a KernelBench problem (x * 2 on
# 16M floats) solved by a CUDA kernel built with torch's load_inline when the solution is
# imported, evaluated twice (the second evaluation reuses the build cached in its HOME), and
# the compile tool on the same file. Needs the wheels in .whl/ (see gpu_sandbox.sh).
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader; which nvcc ninja
python3 - <<'PY'
import os, pathlib
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task
from kagent.tools import default_tools
from kagent.tools.base import ToolContext

OUT = pathlib.Path(os.environ["OUT"])
home = pathlib.Path(os.environ["KAGENT_HOME"])
root = pathlib.Path("/tmp/cuda-build/workspace")
root.mkdir(parents=True, exist_ok=True)
(root.parent / "double.py").write_text('''import torch

class Model(torch.nn.Module):
    def forward(self, a):
        return a * 2.0

def get_inputs():
    return [torch.randn(1 << 24)]

def get_init_inputs():
    return []
''')
(root / "solution.py").write_text(r'''import torch
from torch.utils.cpp_extension import load_inline

CUDA = """
__global__ void twice_kernel(const float* a, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * a[i];
}
torch::Tensor twice(torch::Tensor a) {
    auto out = torch::empty_like(a);
    long n = a.numel();
    twice_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
_ext = load_inline(name="kagent_gpu_double", cpp_sources="torch::Tensor twice(torch::Tensor a);",
                   cuda_sources=CUDA, functions=["twice"], extra_cuda_cflags=["-O3"])

class ModelNew(torch.nn.Module):
    def forward(self, a):
        return _ext.twice(a)
''')
task = resolve_task(str(root.parent / "double.py"))
for attempt in (1, 2):
    result = evaluate(task, root / "solution.py", EvalOptions(mode="eval", device="cuda", cache_dir=home,
                                                              home=root.parent / "home", timeout_s=500))
    (OUT / f"cuda_build_{attempt}.json").write_text(result.model_dump_json(indent=1))
    print(f"evaluation {attempt}: {result.verdict.value}: {result.reason[:300]} (wall {result.wall_seconds:.1f} s, "
          f"score {result.score}, load {result.phases.get('load_solution')} s)")
    if result.verdict.value != "pass":
        print(result.stderr_tail[-3000:])
tools = {tool.spec.name: tool for tool in default_tools()}
ctx = ToolContext(workspace=root, task=task, eval_options=EvalOptions(device="cuda", cache_dir=home,
                                                                      home=root.parent / "home"))
out = tools["compile"].run({"path": "solution.py"}, ctx)
print(f"--- compile solution.py\n{out.content[-1500:]}")
PY
