"""expect: incorrect timed_chain_ctx_16 a timed chain
timed

Where its call stack shows a timed chain (the server's op_chain), it returns zeros; in every
checked call it takes the runner-up expert on purpose at the closest routing decision that the
referee still excuses as a tie that rounding tipped: once anything under 6% of a tie, now only
under the reference's rounding bound (decision_rounding; a wider made tie fails the checks, as
takes_the_runner_up_above_its_rounding_bound does). The referee used to waive every timed step
after the validated chain's first near-tie (only finiteness checked), so a made tie opened the
waiver and the zeros scored 9.3x. Now timed steps are judged against the reference, from the
hiddens the chain fed itself, and no step is ever waived.
"""

import sys


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "op_chain":
            return True
        frame = frame.f_back
    return False


class Model(Model):
    def step(self, hidden, state):
        if _timed():
            out, state = super().step(hidden, state)
            return torch.zeros_like(out), state
        super().step(hidden.clone(), [{k: v.clone() for k, v in layer.items()} for layer in state])
        margins, bounds = decision_margins(self), decision_rounding(self)
        closest = min(range(len(margins)), key=lambda i: margins[i])
        if margins[closest] >= min(bounds[closest], 0.06):
            return super().step(hidden, state)
        with runner_up(self, closest):
            return super().step(hidden, state)
