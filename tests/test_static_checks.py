"""The AST rules that run before any solution code does."""

from __future__ import annotations

import pytest

from kagent.sandbox.results import Verdict
from kagent.sandbox.static_checks import scan

from conftest import reference_solution, run_eval

FORBIDDEN = ["fla", "vllm", "reference", "baseline"]


def findings(tmp_path, source: str, **files: str):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    solution = tmp_path / "solution.py"
    solution.write_text(source)
    return [(f.file, f.rule, f.evidence) for f in scan(solution, FORBIDDEN)]


@pytest.mark.parametrize(
    "source, rule",
    [
        ("import fla\n", "forbidden_import"),
        ("import fla.ops.kda as k\n", "forbidden_import"),
        ("from vllm import LLM\n", "forbidden_import"),
        ("import reference\n", "forbidden_import"),
        ("from baseline import Model\n", "forbidden_import"),
        ("import kagent.sandbox\n", "forbidden_import"),
        ("import importlib\nm = importlib.import_module('fl' + 'a')\n", "dynamic_import"),
        ("from importlib import import_module\n", "dynamic_import"),
        ("m = __import__(''.join(['f', 'la']))\n", "dynamic_import"),
        ("import builtins\n", "dynamic_import"),
        ("import sys\nref = sys.modules['reference']\n", "sys_modules"),
        ("import sys as s\nx = getattr(s, 'modules')\n", "dynamic_code"),
        ("exec('import fla')\n", "dynamic_code"),
        ("f = eval\n", "dynamic_code"),
        ("x = __builtins__['__import__']\n", "dynamic_import"),
        ("import runpy\n", "dynamic_import"),
        ("import sys\nm = vars(sys)['modules']\n", "dynamic_code"),
        ("import sys\nm = sys.__dict__['modules']\n", "sys_modules"),
        ("from sys import modules\n", "sys_modules"),
    ],
)
def test_forbidden_and_hidden_imports_are_found(tmp_path, source, rule):
    found = findings(tmp_path, source)
    assert any(r == rule for _, r, _ in found), found
    assert all(f == "solution.py" for f, _, _ in found)


@pytest.mark.parametrize(
    "source, rule",
    [
        ('import torch\nc = torch.__dict__["compile"]\n', "torch_compile"),
        ("import torch\nc = vars(torch)['compile']\n", "torch_compile"),
        ("import torch\nc = torch.__dict__.get('compile')\n", "torch_compile"),
        ("import torch\nc = torch.__getattribute__('compile')\n", "torch_compile"),
        ("import torch\nc = object.__getattribute__(torch, 'compile')\n", "torch_compile"),
        ("import torch\nd = torch.__dict__['_dynamo']\n", "torch_compile"),
        ("import torch as t\nG = t.cuda.__dict__['CUDAGraph']\n", "cuda_graph"),
        ("from torch import cuda\ng = vars(cuda)['graph']\n", "cuda_graph"),
        ("import torch\nf = torch.cuda.__dict__['make_graphed_callables']\n", "cuda_graph"),
        ("import torch\nname = 'comp' + 'ile'\nc = torch.__dict__[name]\n", "computed_getattr"),
        ("import torch\nc = torch.__getattribute__(''.join(['comp', 'ile']))\n", "computed_getattr"),
    ],
)
def test_torch_attributes_looked_up_by_name_are_judged_by_that_name(tmp_path, source, rule):
    assert [r for _, r, _ in findings(tmp_path, source)] == [rule]


def test_harmless_lookups_in_torchs_namespace_pass(tmp_path):
    source = """
import torch
half = torch.__dict__["float16"]
dtype = vars(torch).get("bfloat16")
fp32 = torch.__getattribute__("float32")
settings = {"compile": False}  # a dict of its own, not torch's
print(settings["compile"], half, dtype, fp32)
"""
    assert findings(tmp_path, source) == []


def test_local_modules_are_followed(tmp_path):
    found = findings(
        tmp_path,
        "from kernels import fused\nimport pkg.deep\n",
        **{
            "kernels.py": "import torch\nfused = 1\n",
            "pkg/__init__.py": "",
            "pkg/deep.py": "from . import evil\n",
            "pkg/evil.py": "import vllm\n",
        },
    )
    assert found == [("pkg/evil.py", "forbidden_import", "import vllm")]


def test_honest_code_and_comments_pass(tmp_path):
    source = """
# We do not import fla or vllm here; "import reference" in a string is fine too.
import math, os, sys
import torch
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline
import triton
import triton.language as tl
DOC = "import fla"
print(sys.version, os.getcwd(), math.pi)
class Config:
    pass
print(Config().__dict__, getattr(torch, "bfloat16"))
"""
    assert findings(tmp_path, source) == []


def test_unparsable_file_is_left_to_the_run(tmp_path):
    assert findings(tmp_path, "def broken(:\n") == []


def test_forbidden_solution_never_runs(kimi, kagent_home, tmp_path):
    marker = tmp_path / "ran"
    patch = f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nimport importlib\n"
    result = run_eval(kimi, reference_solution(kimi, tmp_path / "s", patch), kagent_home, mode="check")
    assert result.verdict is Verdict.FORBIDDEN
    assert result.static_findings[0].rule == "dynamic_import"
    assert result.reason.startswith("dynamic_import at solution.py:")
    assert not marker.exists() and result.checks == []
