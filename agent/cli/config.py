"""The settings of a new run from the command line: the defaults (RunSettings), then a --config
YAML file, then the flags, in that order, merged key by key (into the budget too); then what
the model is asked for on every call (its output cap and thinking), from its own limits
(kagent.agent.loop.models.limits) and what the file and the flags said of them.

A file names a setting by its name, or by its flag's name: ``budget: 3h`` is the wall time,
``max_cost`` and ``max_tokens`` are the budget's, ``revert`` is auto_revert, and ``thinking``
(on, off or a budget in tokens, as --thinking) is thinking_budget made from the model's limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import ValidationError

from kagent.agent.loop.models.limits import output_settings
from kagent.agent.settings import MIN_RUN_BUDGET_S, RunSettings, format_duration
from kagent.core.errors import KagentError

# The flags' names for the budget's settings, and for auto_revert.
BUDGET_SHORTHANDS = {"max_cost": "max_cost_usd", "max_tokens": "max_tokens"}
SHORTHANDS = {"revert": "auto_revert"}
# The flag that sets a setting, to name it in a message.
FLAGS = {
    ("model",): "--model",
    ("budget", "wall_s"): "--budget",
    ("budget", "max_cost_usd"): "--max-cost",
    ("budget", "max_tokens"): "--max-tokens",
    ("device",): "--device",
    ("scale",): "--scale",
    ("auto_revert",): "--no-revert",
}


def load_settings(task: str, config_file: Optional[Path], flags: dict[str, Any]) -> RunSettings:
    """The settings of a new run on ``task``: the defaults, then ``config_file`` (YAML), then
    ``flags`` (the command line's, by the flags' names; None: not given), in that order."""
    from_file = _in_settings_terms(_config_file(config_file), str(config_file)) if config_file else {}
    from_flags = _in_settings_terms({k: v for k, v in flags.items() if v is not None}, "the command line")
    merged = _merged(_merged({"task": task}, from_file), from_flags)
    if not merged.get("model"):
        raise KagentError(
            "give --model (or model: in a --config file)",
            hint="e.g. --model anthropic:claude-sonnet-4-5, or --model scripted:demo to play the demo without a key",
        )
    if "thinking" in merged and "thinking_budget" in merged:
        raise KagentError("thinking and thinking_budget are the same setting: give one of them")
    output = output_settings(
        str(merged["model"]),
        merged.pop("thinking", merged.get("thinking_budget")),
        merged.get("reasoning_effort"),
        merged.get("max_output_tokens"),
    )
    merged.update(
        max_output_tokens=output.max_output_tokens,
        thinking_budget=output.thinking_budget,
        reasoning_effort=output.reasoning_effort,
    )
    try:
        settings = RunSettings.model_validate(merged)
    except ValidationError as err:
        raise _said(err, from_flags, config_file) from None
    _check_budget_can_be_used(settings)
    return settings


def _check_budget_can_be_used(settings: RunSettings) -> None:
    """A wall budget too short for a run is refused before anything starts, with the least one."""
    wall_s = settings.budget.wall_s
    if wall_s < MIN_RUN_BUDGET_S:
        raise KagentError(
            f"--budget {format_duration(wall_s)} is shorter than a run can use: half of it is kept for "
            f"re-verifying the best attempt, too little for the re-verification to run, and the other "
            f"half is less than one evaluation takes",
            hint=f"give at least --budget {format_duration(MIN_RUN_BUDGET_S)}",
        )


def known_names() -> list[str]:
    """Every name a --config file may give a setting by."""
    return sorted({*RunSettings.model_fields, "thinking", *SHORTHANDS, *BUDGET_SHORTHANDS} - {"task"})


def _in_settings_terms(given: dict[str, Any], source: str) -> dict[str, Any]:
    """``given`` with the flags' names turned into the settings' own (see SHORTHANDS)."""
    layer = dict(given)
    budget = layer.pop("budget", {})
    budget = dict(budget) if isinstance(budget, dict) else {"wall_s": budget}
    for names, into in ((BUDGET_SHORTHANDS, budget), (SHORTHANDS, layer)):
        for short, name in names.items():
            if short in layer:
                if name in into:
                    raise KagentError(f"{source}: {short} and {name} are the same setting: give one of them")
                into[name] = layer.pop(short)
    return {**layer, "budget": budget} if budget else layer


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top, key by key, into nested settings (the budget) too."""
    merged = dict(base)
    for key, value in over.items():
        merged[key] = (
            _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def _config_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise KagentError(f"cannot read the config file {path}: {err}") from err
    if not isinstance(data, dict):
        raise KagentError(
            f"{path}: a config file holds settings by name, not {type(data).__name__}",
            hint=f"known: {', '.join(known_names())}",
        )
    return data


def _said(err: ValidationError, from_flags: dict[str, Any], config_file: Optional[Path]) -> KagentError:
    """The first problem, in the terms of whoever gave the setting: the flag, or the file."""
    unknown = [".".join(map(str, e["loc"])) for e in err.errors() if e["type"] == "extra_forbidden"]
    if unknown:
        return KagentError(f"{config_file}: unknown settings {unknown}", hint=f"known: {', '.join(known_names())}")
    first = err.errors()[0]
    loc = tuple(str(part) for part in first["loc"])
    who = FLAGS[loc] if loc in FLAGS and _given(from_flags, loc) else f"{config_file}: {'.'.join(loc)}"
    return KagentError(f"{who}: {first['msg'].lower()}; got {first['input']!r}")


def _given(layer: dict[str, Any], loc: tuple[str, ...]) -> bool:
    for key in loc:
        if not isinstance(layer, dict) or key not in layer:
            return False
        layer = layer[key]
    return True
