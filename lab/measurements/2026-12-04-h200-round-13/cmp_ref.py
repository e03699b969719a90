"""Old (expert by expert) against new (batched) reference MoE: same outputs? how fast?

Run from the repository root with scratch/cmp_ref.py (this file) and scratch/ref_old.py, the
reference before a5ff9ff: `git show e713343:tasks/02_kimi_linear_decode/reference.py`.
Arguments: scale (smoke|full), device, number of seeds. (Reformatted for the linter after the
run; the statements are the ones that ran.)
"""

import importlib.util
import sys
import time

import torch

sys.path.insert(0, "tasks/02_kimi_linear_decode")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def clone(state):
    return [{k: v.clone() for k, v in d.items()} for d in state]


old, new = load("ref_old", "scratch/ref_old.py"), load("ref_new", "tasks/02_kimi_linear_decode/reference.py")
shapes = importlib.import_module("shapes")
scale = sys.argv[1] if len(sys.argv) > 1 else "smoke"
dev = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")
shape = shapes.SMOKE_SHAPES[0] if scale == "smoke" else shapes.SHAPES[0]
torch.manual_seed(0)
with torch.no_grad():
    mo = old.Model(old.build_config(shape)).to(dev)
    mn = new.Model(new.build_config(shape), init_weights=False).to(dev)
    mn.load_state_dict(mo.state_dict())
    worst, exact = 1.0, 0
    for seed in range(int(sys.argv[3]) if len(sys.argv) > 3 else 6):
        h = old.init_token(mo.cfg, seed, device=dev)
        st = old.init_state(mo.cfg, shape["context_len"], seed, device=dev)
        ho, so = mo.step(h.clone(), clone(st))
        hn, sn = mn.step(h.clone(), clone(st))
        cos = torch.nn.functional.cosine_similarity(ho.float(), hn.float(), dim=0).item()
        worst = min(worst, cos)
        exact += torch.equal(ho, hn)
        diff = (ho.float() - hn.float()).abs().max().item()
        print(f"seed {seed}: cosine {cos:.7f} bitwise {torch.equal(ho, hn)} max|d| {diff:.3g}")
    for name, m in (("old", mo), ("new", mn)):
        for _ in range(2):
            m.step(h.clone(), clone(st))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        n = 5
        for _ in range(n):
            m.step(h.clone(), clone(st))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        print(f"{name}: {(time.perf_counter() - t) / n * 1e3:.1f} ms a step ({scale}, {dev})")
print("worst cosine", worst, "bitwise", exact)
