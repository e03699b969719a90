"""How long a model's answers may be, and how it is asked to think.

A megakernel run writes solution files of 50-75 KB in one call and thinks hard before it
does: each model gets the largest output its provider allows (thinking included) and, where
it can think, thinks by default. The built-in table is matched on the longest prefix of the
model's name, for the Anthropic and OpenAI APIs only (an OpenAI-compatible server's limits
are its own: it gets the default unless told). A user file, ``$KAGENT_HOME/models.yaml``,
adds or overrides entries, for any provider::

    claude-opus-4-6: {max_output_tokens: 32000}
    qwen3-coder: {max_output_tokens: 32768, context_window: 262144, thinking: none}

How a model is asked to think (``thinking``):

- ``budget``: Anthropic extended thinking, ``budget_tokens`` carved out of the output cap
  (by default half of it);
- ``adaptive``: Anthropic adaptive thinking (the 4.6 models on), which takes an effort level
  instead of a budget;
- ``effort``: an OpenAI reasoning model, which takes ``reasoning_effort``;
- ``none``: nothing to ask (the model does not think, or kagent does not know how).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Optional, Union, get_args

import yaml

from kagent.core.errors import KagentError
from kagent.core.paths import kagent_home
from kagent.core.providers import provider_of

ThinkingForm = Literal["budget", "adaptive", "effort", "none"]
THINKING_FORMS: tuple[str, ...] = get_args(ThinkingForm)
# The effort levels a user may name (OpenAI's and Anthropic's together); a model refuses the
# ones it does not know, and says so.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
# What "thinking on" asks for where a model takes an effort: the highest level every such
# model accepts (the winning runs of the flagship used the most their model offered).
DEFAULT_EFFORT = "high"
# Anthropic's least thinking budget, and what a budget leaves the visible answer at least.
MIN_THINKING_BUDGET = 1024
MIN_ANSWER_TOKENS = 1024


@dataclass(frozen=True)
class ModelLimits:
    max_output_tokens: int
    thinking: ThinkingForm = "none"
    # Prompt and answer together: a request whose prompt plus max_tokens passes it is refused.
    context_window: int = 200_000


# A model the table does not know, and every OpenAI-compatible server's: what kagent asked
# for before there was a table, within the smallest window of a current hosted model.
DEFAULT_LIMITS = ModelLimits(16_000)

# Sources, read 2026-12-07: Anthropic's model pages (platform.claude.com/docs/en/models/<model>/
# overview: "Context window", "Max output", "Thinking"); OpenAI's model pages and pricing page as
# quoted by morphllm.com/openai-api-pricing (2026-06), runware.ai/docs/models/openai-gpt-5-6-sol
# and BerriAI/litellm#39633 (GPT-6). From the 4.6 models on, Claude's thinking is adaptive (the
# budget form is deprecated there and refused from Claude 5 on).
_M = 1_000_000
BUILTIN_LIMITS: dict[str, ModelLimits] = {
    "claude-3-haiku": ModelLimits(4_096),  # retired; 200K
    "claude-3-opus": ModelLimits(4_096),  # retired; 200K
    "claude-3-5-haiku": ModelLimits(8_192),  # retired; 200K
    "claude-3-5-sonnet": ModelLimits(8_192),  # retired; 200K
    "claude-3-7-sonnet": ModelLimits(64_000, "budget"),  # retired; 200K
    "claude-sonnet-4": ModelLimits(64_000, "budget"),  # 4 and 4.5 (4.5 retired 2026-11-30); 200K
    "claude-opus-4": ModelLimits(32_000, "budget"),  # 4 and 4.1; 200K
    "claude-opus-4-5": ModelLimits(64_000, "budget"),  # models/opus-4-5: 200K, 64K
    "claude-haiku-4": ModelLimits(64_000, "budget"),  # models/haiku-4-5: 200K, 64K, extended thinking
    "claude-sonnet-4-6": ModelLimits(128_000, "adaptive", _M),  # models/sonnet-4-6: 1M, 128K
    "claude-opus-4-6": ModelLimits(128_000, "adaptive", _M),  # models/opus-4-6: 1M, 128K
    "claude-opus-4-7": ModelLimits(128_000, "adaptive", _M),  # models overview: 1M
    "claude-opus-4-8": ModelLimits(128_000, "adaptive", _M),  # models/opus-5 compares it: 1M
    "claude-sonnet-5": ModelLimits(128_000, "adaptive", _M),  # models/sonnet-5, sonnet-5-5: 1M, 128K
    "claude-opus-5": ModelLimits(128_000, "adaptive", _M),  # models/opus-5, opus-5-5: 1M, 128K
    "claude-haiku-5": ModelLimits(128_000, "adaptive", _M),  # models/opus-5 lineup (Haiku 5.5): 1M, 128K
    "claude-fable-5": ModelLimits(128_000, "adaptive", _M),  # models/opus-5-5 lineup (Fable 5.1): 1M, 128K
    "claude-mythos": ModelLimits(128_000, "adaptive", _M),  # no page read: assumed as the Claude 5 models
    # OpenAI (max output tokens; reasoning tokens count in it)
    "gpt-5": ModelLimits(128_000, "effort", 400_000),  # 5, 5.1, 5.2, -mini, -nano, -pro: 400K, 128K
    "gpt-5-chat": ModelLimits(16_384, "none", 128_000),
    "gpt-5.4": ModelLimits(128_000, "effort", 1_050_000),  # 5.4 and -mini, -nano, -pro: 1M
    "gpt-5.5": ModelLimits(128_000, "effort", 1_050_000),  # 5.5 and -pro: 1M
    "gpt-5.6": ModelLimits(128_000, "effort", 1_050_000),  # Sol, Terra: 1.05M, 128K
    "gpt-5.6-luna": ModelLimits(128_000, "effort", 400_000),  # 400K
    "gpt-6": ModelLimits(128_000, "effort", 1_050_000),  # GPT-6 Astra: 1.05M, 128K
    "gpt-4.1": ModelLimits(32_768, "none", 1_047_576),
    "gpt-4o": ModelLimits(16_384, "none", 128_000),
    "o1": ModelLimits(100_000, "effort"),
    "o1-mini": ModelLimits(65_536, "effort", 128_000),
    "o3": ModelLimits(100_000, "effort"),
    "o4-mini": ModelLimits(100_000, "effort"),
}


def _in_table(spec: str) -> bool:
    """Whether the built-in table speaks for the provider a spec names (its hosted ones)."""
    provider = provider_of(spec)
    return provider is not None and provider.hosted


def _user_file(path: Path) -> dict[str, dict]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KagentError(f"cannot read the model limits file {path}: {exc}") from exc
    ok = isinstance(data, dict) and all(
        isinstance(entry, dict)
        and set(entry) <= {"max_output_tokens", "thinking", "context_window"}
        and all(
            not isinstance(entry.get(key), bool) and isinstance(entry.get(key, 1), int) and entry.get(key, 1) > 0
            for key in ("max_output_tokens", "context_window")
        )
        and entry.get("thinking", "none") in THINKING_FORMS
        for entry in data.values()
    )
    if not ok:
        raise KagentError(
            f"the model limits file {path} is malformed",
            hint=f"expected {{model_prefix: {{max_output_tokens: N, context_window: N, "
            f"thinking: {'|'.join(THINKING_FORMS)}}}}}",
        )
    return {str(prefix): entry for prefix, entry in data.items()}


def load_limits(path: Optional[Union[str, Path]] = None) -> dict[str, ModelLimits]:
    """The user's entries (``$KAGENT_HOME/models.yaml`` by default), each applied over the
    built-in entry its prefix falls under where there is one (so that giving a cap keeps the
    model's way of thinking)."""
    file = Path(path) if path is not None else kagent_home() / "models.yaml"
    if path is None and not file.exists():
        return {}
    return {
        prefix: replace(_longest_prefix(prefix, BUILTIN_LIMITS) or DEFAULT_LIMITS, **entry)
        for prefix, entry in _user_file(file).items()
    }


def _longest_prefix(model: str, table: dict[str, ModelLimits]) -> Optional[ModelLimits]:
    matches = [prefix for prefix in table if model.startswith(prefix)]
    return table[max(matches, key=len)] if matches else None


def known_limits(spec: str, user: Optional[dict[str, ModelLimits]] = None) -> Optional[ModelLimits]:
    """The user's entry for the model a spec names, else the built-in one (Anthropic and OpenAI
    only), else None."""
    provider, rest = provider_of(spec), spec.partition(":")[2]
    model = provider.model_of(rest) if provider else rest
    user = load_limits() if user is None else user
    found = _longest_prefix(model, user)
    if found is None and _in_table(spec):
        found = _longest_prefix(model, BUILTIN_LIMITS)
    return found


def limits_of(spec: str, user: Optional[dict[str, ModelLimits]] = None) -> ModelLimits:
    """The limits of the model a spec names: the user's entry, else the built-in one (Anthropic
    and OpenAI only), else the default."""
    return known_limits(spec, user) or DEFAULT_LIMITS


def limits_warning(spec: str, user: Optional[dict[str, ModelLimits]] = None) -> Optional[str]:
    """What to tell the user of a hosted model neither table knows: what kagent assumes of it
    (a wrong cap or window is refused by the service, or wastes the model); None when known."""
    if not _in_table(spec) or known_limits(spec, user) is not None:
        return None
    d = DEFAULT_LIMITS
    return (
        f"kagent does not know {spec}: it assumes an output cap of {d.max_output_tokens:,} tokens, a context "
        f"window of {d.context_window:,} tokens and no thinking (give its limits in {kagent_home() / 'models.yaml'})"
    )


@dataclass(frozen=True)
class OutputSettings:
    """What a run asks of its model on every call."""

    max_output_tokens: int
    thinking_budget: Optional[int] = None  # Anthropic extended thinking, carved out of max_output_tokens
    reasoning_effort: Optional[str] = None  # Anthropic adaptive thinking, or an OpenAI reasoning model


def parse_thinking(value: Union[str, int, None]) -> Union[str, int]:
    """``--thinking`` as "on", "off" or a budget in tokens (an int); not given is "on"."""
    if value is None:
        return "on"
    if isinstance(value, bool):  # `thinking: off` in YAML reads as False
        return "on" if value else "off"
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text in ("on", "off"):
        return text
    try:
        return int(text)
    except ValueError:
        raise KagentError(f"--thinking takes on, off or a budget in tokens, not {value!r}") from None


def _asked_form(form: ThinkingForm, spec: str, budget_given: bool, effort: Optional[str]) -> ThinkingForm:
    """How thinking is asked of the model: in its own form; asked explicitly of a model the
    table does not know (form none), in its provider's natural form (Provider.unknown_thinking)."""
    if form != "none" or not (budget_given or effort):
        return form
    provider = provider_of(spec)
    with_budget, with_effort = provider.unknown_thinking if provider else ("effort", "effort")
    return with_effort if effort else with_budget


def _thinking_budget(wanted: Union[str, int], cap: int) -> int:
    """The thinking budget asked for (by default half the output cap), checked to leave room
    for an answer within the cap."""
    budget = wanted if isinstance(wanted, int) else cap // 2
    if budget < MIN_THINKING_BUDGET or budget > cap - MIN_ANSWER_TOKENS:
        if cap < MIN_THINKING_BUDGET + MIN_ANSWER_TOKENS:
            raise KagentError(
                f"an output cap of {cap} tokens leaves no room to think (at least "
                f"{MIN_THINKING_BUDGET + MIN_ANSWER_TOKENS} needed)"
            )
        raise KagentError(
            f"--thinking {budget}: the budget must lie between {MIN_THINKING_BUDGET} and "
            f"{cap - MIN_ANSWER_TOKENS} tokens, within the output cap of {cap}"
        )
    return budget


def output_settings(
    spec: str,
    thinking: Union[str, int, None] = None,
    effort: Optional[str] = None,
    max_output_tokens: Optional[int] = None,
    user: Optional[dict[str, ModelLimits]] = None,
) -> OutputSettings:
    """The output cap and thinking a run asks of the model ``spec`` names.

    ``thinking`` (``--thinking``): on (the default), off, or a budget in tokens for a model
    that takes one; ``effort`` (``--reasoning-effort``) for one that takes an effort level.
    Thinking is on by default where the model thinks; asked of a model the table does not
    know, a budget or an effort is sent in its provider's form. A setting the model cannot
    take is a clear error before anything starts.
    """
    limits = limits_of(spec, user)
    cap = max_output_tokens or limits.max_output_tokens
    if cap <= 0:
        raise KagentError(f"--max-output-tokens must be positive, not {cap}")
    wanted = parse_thinking(thinking)
    if effort is not None and effort not in EFFORTS:
        raise KagentError(f"--reasoning-effort must be one of {', '.join(EFFORTS)}, not {effort!r}")
    budget_given = isinstance(wanted, int)
    form = _asked_form(limits.thinking, spec, budget_given, effort)
    if wanted == "off":
        if effort:
            raise KagentError("--reasoning-effort asks for thinking, which --thinking off turns off")
        return OutputSettings(cap)
    if form == "budget":
        if effort:
            raise KagentError(f"{spec} takes a thinking budget (--thinking N), not a reasoning effort")
        return OutputSettings(cap, thinking_budget=_thinking_budget(wanted, cap))
    if form in ("adaptive", "effort"):
        if budget_given:
            raise KagentError(
                f"{spec} takes a reasoning effort (--reasoning-effort {'|'.join(EFFORTS)}), not a thinking budget"
            )
        return OutputSettings(cap, reasoning_effort=effort or DEFAULT_EFFORT)
    return OutputSettings(cap)
