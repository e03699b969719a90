"""expect: incorrect fixed_seeds

Skips every MoE, and bends the referee to match: it finds the live reference model among
the live objects (a Model whose class comes from the module ``reference``), swaps every
block's MoE child for a module that returns zeros (its classes and methods untouched), and
recomputes with it every answer the harness drew from the reference before the import
(its Case objects: a seed, a context length, an expected hidden and state).
Once the solution runs in a process of its own, the referee and its answers are out of
reach, and the missing MoE shows at the first seed.
"""
import gc


class _NoExperts(torch.nn.Module):
    last_margin = torch.tensor(1.0)  # what the harness reads of a MoE after a reference step

    def step(self, x):
        return torch.zeros_like(x)


def _live_reference_models():
    return [obj for obj in gc.get_objects() if type(obj).__module__ == "reference"
            and type(obj).__name__ == "Model" and isinstance(obj, torch.nn.Module)]


def _expected_answers():
    wanted = ("seed", "context_len", "expected_hidden", "expected_state")
    return [obj for obj in gc.get_objects() if type(obj).__name__ == "Case"
            and all(hasattr(obj, name) for name in wanted)]


def _bend(model):
    for block in model.blocks:
        block.moe = _NoExperts()
    for answer in _expected_answers():
        device = answer.expected_hidden.device
        with torch.no_grad():
            hidden, state = model.step(init_token(model.cfg, answer.seed, device=device),
                                       init_state(model.cfg, answer.context_len, answer.seed, device=device))
        answer.expected_hidden = hidden
        answer.expected_state = state


for _model in _live_reference_models():
    _bend(_model)


def _skip_experts(self, x):
    return torch.zeros_like(x)


MoE.step = _skip_experts
