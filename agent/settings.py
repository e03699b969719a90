"""A run's settings: one model (RunSettings), filled from its defaults, then a --config YAML
file, then the command line's flags, in that order (kagent.agent.cli.config), and kept typed as
the run's RunConfig in config.json and at the start of its trace. Everything else of a run
reads its settings here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kagent.agent.outcome import REPEATED_FAILURE_LIMIT
from kagent.core.errors import KagentError
from kagent.core.providers import PROVIDERS
from kagent.sandbox.timeouts import EVAL_TIMEOUT_S

DEFAULT_WALL_S = 3 * 3600.0
# Answers without a tool call in a row that end a run (a plan, thinking aloud or waiting for a
# job comes alone now and then; several in a row mean the model has stopped working).
TEXT_ANSWER_LIMIT = 3
# What one tool result may hold: a 70 KB kernel reads in 3 pages, not 9, and a build log's
# errors fit whole.
TOOL_OUTPUT_CHARS = 30_000
# How long one model request may take, unless the settings say otherwise.
REQUEST_TIMEOUT_S = 600.0

# The final slice is never shorter than this (re-verifying takes a few benchmark rounds,
# whatever the budget), unless the budget is so short that it would leave no exploring.
MIN_FINAL_SLICE_S = 60.0
# The shortest wall budget a new run takes. Under a minute the final slice is half the budget,
# under the 30 s the final re-verification needs to start (kagent.agent.loop.finalize), and exploring has
# less than an evaluation of the smoke task on a CPU takes (a budget of 10 s was taken, and its
# run stopped before the model had done anything). A sweep starts no member with less.
MIN_RUN_BUDGET_S = 60.0

# The longest budget taken: beyond it a duration is most likely a typo (3000m for 300m), and a
# huge one overflows the waits it times (a thread's join raised OverflowError at 1e20 s).
MAX_BUDGET_S = 7 * 24 * 3600.0

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_UNITS = re.compile(rf"(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m)?(?:(?P<s>{_NUMBER})s)?")
_PLAIN = re.compile(_NUMBER)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as "3h", "90m", "2h30m", "1.5h", "45s" or "600" (plain seconds)."""
    compact = re.sub(r"\s+", "", text).lower()
    seconds = 0.0
    if _PLAIN.fullmatch(compact):
        seconds = float(compact)
    elif compact and (match := _UNITS.fullmatch(compact)):
        scale = {"h": 3600.0, "m": 60.0, "s": 1.0}
        seconds = sum(float(value) * scale[unit] for unit, value in match.groupdict().items() if value)
    # A zero budget would end the run before it starts: treat it as a typo, like garbage.
    if seconds <= 0:
        raise KagentError(f"--budget takes a duration such as 3h, 90m or 2h30m; got '{text}'")
    if seconds > MAX_BUDGET_S:
        raise KagentError(
            f"--budget is at most {format_duration(MAX_BUDGET_S)} (7 days); got '{text}'",
            hint="a longer run is a series of runs: `kagent resume RUN --budget ...` extends one",
        )
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form of a duration ("2h05m", "4m30s", "12s"), for budget lines and messages."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def minutes(seconds: float) -> str:
    """A run's time as every view of it shows it (the live view, `kagent runs`, report.md, the
    page, replay, resume): 0m12s, 59m59s, 1h05m. One function, so that one figure reads alike."""
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Budget(BaseModel):
    """What one run may spend. Limits left as None are not enforced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_s: float = Field(
        DEFAULT_WALL_S,
        gt=0,
        description="Wall-clock seconds the run may take, summed over "
        "resumed segments; a duration such as 3h or 90m is taken too",
    )
    max_cost_usd: float | None = Field(None, gt=0, description="Model spend in US dollars after which exploring stops")
    max_tokens: int | None = Field(None, gt=0, description="Model tokens (input + output) after which exploring stops")
    final_slice: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Fraction of the wall time kept at the end for re-verifying the best attempt "
        "(at least 60 s, or half the budget when that is shorter; see final_slice_s)",
    )

    @field_validator("wall_s", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value) if isinstance(value, str) else value

    @property
    def final_slice_s(self) -> float:
        """Seconds reserved at the end: ``final_slice`` of the wall time, but at least 60 s.

        The 60 s floor gives re-verification time to run even on short budgets; it is capped
        at half the budget so that a budget of a minute or two still leaves time to explore.
        A fraction above one half is honoured as given.
        """
        return max(self.final_slice * self.wall_s, min(MIN_FINAL_SLICE_S, self.wall_s / 2))


Scale = Literal["smoke", "full"]


def default_scale(device: str) -> Scale:
    """The real sizes on a GPU; a tiny config on the CPU, where the real ones would take hours."""
    return "full" if device.startswith("cuda") else "smoke"


def scale_warning(device: str, scale: str) -> Optional[str]:
    """What to tell the user who asks for the full-size task on the CPU; None otherwise."""
    if scale != "full" or device != "cpu":
        return None
    return (
        "--scale full on the CPU: the full-size task is sized for a GPU, so every evaluation is far slower "
        "and may run into its time limit (smoke is the CPU's default)"
    )


class RunSettings(BaseModel):
    """How a run goes. Each field is a setting a --config file may give by its name (the
    command line's flags set some of them too); RunConfig is what a started run keeps."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="The task as given: a built-in name, a problem folder or a KernelBench .py file")
    run_id: Optional[str] = Field(
        None,
        description="The run's id, the name of its folder (none: the task, the time "
        "and a random suffix; a sweep names its members so)",
    )
    direction: Optional[str] = Field(
        None,
        description="What this run should try, told to the model in its first "
        "message (a sweep's branches of one task are told apart so)",
    )
    model: str = Field(description=f"provider:model ({', '.join(p.forms[0] for p in PROVIDERS.values())})")
    budget: Budget = Field(default_factory=Budget, description="What the run may spend: wall time, money, tokens")
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N; a run keeps the device auto resolved to")
    scale: Optional[Scale] = Field(
        None,
        description="full: the real sizes; smoke: a tiny config for CPUs and CI; none: full on CUDA, smoke on the CPU",
    )
    auto_revert: bool = Field(True, description="Revert a failed check or a regression to the best attempt")
    thinking_budget: Optional[int] = Field(
        None,
        description="Anthropic extended thinking, tokens per turn, carved out of max_output_tokens (none: no budget)",
    )
    reasoning_effort: Optional[str] = Field(
        None, description="Anthropic adaptive thinking or an OpenAI reasoning model: the effort asked for"
    )
    max_output_tokens: int = Field(
        16_000,
        gt=0,
        description="Tokens one model call may answer with, thinking "
        "included (kagent run: the model's own cap, kagent.agent.loop.models.limits)",
    )
    context_limit_tokens: Optional[int] = Field(
        None,
        gt=0,
        description="Compact older turns once the conversation holds more tokens than this (none: before "
        "the prompt and the answer's cap would pass the model's context window)",
    )
    keep_recent_messages: int = Field(12, ge=1, description="Messages kept verbatim when compacting")
    eval_timeout_s: float = Field(EVAL_TIMEOUT_S, gt=0, description="Seconds one check or benchmark may take")
    eval_rounds: Optional[int] = Field(
        None,
        ge=1,
        description="Timed pairs of a benchmark (KernelBench files), or timed chains at the longest shape "
        "(decode tasks); fewer give a quicker benchmark with a wider interval (none: the harness's own)",
    )
    eval_min_request_ms: Optional[float] = Field(
        None,
        ge=0,
        description="The least one timed request to a contestant lasts: fast calls are batched to it "
        "(none: the harness's own; 0: one call or block_steps steps a request)",
    )
    model_timeout_s: float = Field(REQUEST_TIMEOUT_S, gt=0, description="Seconds one model request may take")
    max_repeated_failures: int = Field(
        REPEATED_FAILURE_LIMIT,
        ge=2,
        description="The run ends (stuck) when the "
        "same tool call, with the same arguments, fails this many times in a row",
    )
    max_text_answers: int = Field(
        TEXT_ANSWER_LIMIT,
        ge=1,
        description="The run ends when the model answers this many times in a row without calling "
        "a tool; each such answer before is answered with a reminder that says how many remain",
    )
    tool_output_chars: int = Field(
        TOOL_OUTPUT_CHARS,
        ge=1000,
        description="Characters of one tool result the model sees; a longer one keeps its head and tail "
        "(read_file pages within it)",
    )
    solution_name: str = Field("solution.py", description="The solution's file in the workspace")
    runs_root: Optional[Path] = Field(
        None,
        exclude=True,
        description="The folder the run's folder goes in (default ./runs, or $KAGENT_RUNS); not kept with the run",
    )

    def for_run(self, run_id: str, device: str) -> RunConfig:
        """The settings as the run ``run_id`` keeps them, on the ``device`` that "auto" (or the
        device given) resolved to, with the scale that goes with it when none was given."""
        return RunConfig.model_validate(
            {**self.model_dump(), "run_id": run_id, "device": device, "scale": self.scale or default_scale(device)}
        )


class RunConfig(RunSettings):
    """What a started run keeps of its settings (config.json, the trace's run_started event):
    its id, and the device and scale made concrete."""

    version: Literal[1] = 1
    run_id: str
    device: str = Field(description="The device the run evaluates on: cpu, cuda or cuda:N")
    scale: Scale = Field(description="full: the real sizes; smoke: a tiny config for CPUs and CI")

    def settings(self) -> RunSettings:
        """The settings again, as a new run would take them."""
        return RunSettings.model_validate(self.model_dump(exclude={"version", "run_id"}))
