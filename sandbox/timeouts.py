"""How long one evaluation's child process may run before its process group is killed: each
default stated here once, read by EvalOptions (kagent.sandbox.evaluate), a run's settings
(kagent.agent.settings) and `kagent eval` (kagent.agent.cli.app). A module of constants alone,
so that the settings and the command line's help read them without importing the evaluation,
and torch with it."""

from __future__ import annotations

# Every evaluation unless told otherwise: each check and benchmark of a run, at either scale,
# an EvalOptions built in code, and `kagent eval` at full scale. The first evaluation of a
# solution builds its extensions before it times anything, which alone can take minutes.
EVAL_TIMEOUT_S = 900.0
# `kagent eval` at smoke scale, a deliberate exception: a person waits at the terminal, and at
# the tiny sizes an evaluation that takes longer than this has hung or is far off. A run keeps
# EVAL_TIMEOUT_S at smoke scale too: its evaluations build whatever the model wrote, and the
# scale does not shorten a build.
SMOKE_CLI_TIMEOUT_S = 300.0


def cli_eval_timeout_s(scale: str) -> float:
    """The limit of a `kagent eval` at ``scale`` ("full" or "smoke") given no --timeout."""
    return EVAL_TIMEOUT_S if scale == "full" else SMOKE_CLI_TIMEOUT_S


# A request to the solution that runs this long once it is built, with no compiler running, has
# hung (kagent.sandbox.harness.watchdog): no decode step takes a minute.
HANG_AFTER_S = 60.0
