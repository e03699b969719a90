"""Chat models behind kagent's provider-neutral ChatModel protocol, chosen by a spec string.

A spec is ``provider:<rest>``; the providers, and the forms each takes, are the entries of
kagent.core.providers (``anthropic:<model>``, ``openai:<model>`` through OpenAI's Responses
API, ``openai-chat:<model>``, ``openai-compatible:<url>#<model>``, ``scripted:<file>``). Each
entry names its factory by import path, so a provider's module, and the SDK it needs, is
imported only when used, and a missing SDK only matters to its users.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Optional

from kagent.agent.loop.models.spec import ModelChoice, bad_spec
from kagent.agent.settings import REQUEST_TIMEOUT_S, RunSettings
from kagent.core.errors import ModelError
from kagent.core.messages import ChatModel
from kagent.core.providers import PROVIDERS, Provider, provider_of, spec_forms

# Every form a spec may take, for messages that list them.
SPEC_FORMS = tuple(spec_forms())
__all__ = ["PROVIDERS", "SPEC_FORMS", "make_model", "run_model"]


def _factory(provider: Provider) -> Callable[[ModelChoice], ChatModel]:
    module, _, function = provider.factory.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except ImportError as exc:
        raise ModelError(
            f"the {provider.name} models need the {provider.package} package, which is not installed ({exc})",
            hint=f"pip install {provider.package}",
        ) from exc


def make_model(
    spec: str,
    *,
    timeout_s: float = REQUEST_TIMEOUT_S,
    base_url: Optional[str] = None,
    thinking_budget: Optional[int] = None,
    reasoning_effort: Optional[str] = None,
) -> ChatModel:
    """The model a spec names; its ``name`` is the spec.

    ``base_url`` overrides the provider's variable (ANTHROPIC_BASE_URL, OPENAI_BASE_URL) or the
    URL of an openai-compatible spec. ``thinking_budget`` enables Anthropic extended thinking;
    ``reasoning_effort`` Anthropic adaptive thinking, or an OpenAI model's reasoning effort
    (``limits.output_settings`` says which a model takes).
    """
    name, sep, rest = spec.partition(":")
    provider = provider_of(spec)
    if provider is None:
        raise bad_spec(spec, f"unknown provider {name!r}" if sep else "no provider")
    if not rest:
        raise bad_spec(spec, "nothing after the provider")
    choice = ModelChoice(spec, provider, rest, timeout_s, base_url, thinking_budget, reasoning_effort)
    return _factory(provider)(choice)


def run_model(settings: RunSettings) -> ChatModel:
    """The model a run's settings (or a started run's config) name, with the options they give
    it: made here alone, for ``kagent run`` (before anything slow, so that a bad spec or a
    missing key is said at once) and for a run started or resumed without a model given."""
    return make_model(
        settings.model,
        timeout_s=settings.model_timeout_s,
        thinking_budget=settings.thinking_budget,
        reasoning_effort=settings.reasoning_effort,
    )
