"""Chat models behind kagent's provider-neutral ChatModel protocol, chosen by a spec string.

Specs: ``anthropic:<model>`` (the Messages API), ``openai:<model>`` (OpenAI's Responses API,
the one its reasoning models take function tools with), ``openai-chat:<model>`` (an OpenAI
model through chat.completions, where a user asks for it), ``openai-compatible:<url>#<model>``
(a local vLLM, SGLang, llama.cpp or Ollama server, through chat.completions) and
``scripted:<path>`` (a replayed script).
Provider modules are imported only when used, so a missing SDK only matters to its users.
"""

from __future__ import annotations

import importlib
import os
from typing import Optional
from urllib.parse import urlsplit

from kagent.agent.loop.models.limits import known_limits
from kagent.agent.settings import REQUEST_TIMEOUT_S
from kagent.core.errors import ModelError
from kagent.core.messages import ChatModel

# provider -> (module under kagent.agent.loop.models, the pip package it needs)
PROVIDERS: dict[str, tuple[str, str]] = {
    "anthropic": ("kagent.agent.loop.models.anthropic", "anthropic"),
    "openai": ("kagent.agent.loop.models.responses", "openai"),
    "openai-chat": ("kagent.agent.loop.models.openai", "openai"),
    "openai-compatible": ("kagent.agent.loop.models.openai", "openai"),
    "scripted": ("kagent.agent.loop.models.scripted", "pyyaml"),
}
SPEC_FORMS = (
    "anthropic:<model>",
    "openai:<model>",
    "openai-chat:<model>",
    "openai-compatible:<url>#<model>",
    "scripted:<path>",
    "scripted:<name> (a session kagent ships: demo, sweep, megakernel)",
    "scripted:<path>?delay=<seconds>",
)


def _bad_spec(spec: str, why: str) -> ModelError:
    return ModelError(f"bad model spec {spec!r}: {why}", hint="valid forms: " + ", ".join(SPEC_FORMS))


def _import(provider: str):
    module, package = PROVIDERS[provider]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModelError(
            f"the {provider} models need the {package} package, which is not installed ({exc})",
            hint=f"pip install {package}",
        ) from exc


def _key(variable: str) -> str:
    key = os.environ.get(variable)
    if not key:
        raise ModelError(f"no API key: set {variable}")
    return key


def make_model(
    spec: str,
    *,
    timeout_s: float = REQUEST_TIMEOUT_S,
    base_url: Optional[str] = None,
    thinking_budget: Optional[int] = None,
    reasoning_effort: Optional[str] = None,
) -> ChatModel:
    """The model a spec names; its ``name`` is the spec.

    ``base_url`` overrides ANTHROPIC_BASE_URL / OPENAI_BASE_URL (and the URL of an
    openai-compatible spec). ``thinking_budget`` enables Anthropic extended thinking;
    ``reasoning_effort`` Anthropic adaptive thinking, or an OpenAI model's reasoning effort
    (``limits.output_settings`` says which a model takes).
    """
    provider, sep, rest = spec.partition(":")
    if not sep or provider not in PROVIDERS:
        raise _bad_spec(spec, f"unknown provider {provider!r}" if sep else "no provider")
    if not rest:
        raise _bad_spec(spec, "nothing after the provider")
    module = _import(provider)
    if provider == "anthropic":
        return module.AnthropicModel(
            rest,
            api_key=_key("ANTHROPIC_API_KEY"),
            name=spec,
            timeout_s=timeout_s,
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None,
            thinking_budget=thinking_budget,
            reasoning_effort=reasoning_effort,
        )
    if provider == "openai":
        # A model known not to reason (gpt-4.1, gpt-4o) is not asked for reasoning items.
        known = known_limits(spec)
        return module.ResponsesModel(
            rest,
            api_key=_key("OPENAI_API_KEY"),
            name=spec,
            timeout_s=timeout_s,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            reasoning_effort=reasoning_effort,
            reasons=bool(reasoning_effort) or known is None or known.thinking != "none",
        )
    if provider == "openai-chat":
        return module.OpenAIModel(
            rest,
            api_key=_key("OPENAI_API_KEY"),
            name=spec,
            timeout_s=timeout_s,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            reasoning_effort=reasoning_effort,
        )
    if provider == "openai-compatible":
        url, sep, model = rest.rpartition("#")
        if not sep or not url or not model:
            raise _bad_spec(spec, "an openai-compatible spec needs <url>#<model>")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise _bad_spec(spec, f"{url!r} is not an http(s) URL, such as http://localhost:8000/v1")
        # Local servers usually ignore the key, but the SDK insists on one.
        return module.OpenAIModel(
            model,
            api_key=os.environ.get("OPENAI_API_KEY") or "none",
            name=spec,
            base_url=base_url or url,
            timeout_s=timeout_s,
            compatible=True,
            reasoning_effort=reasoning_effort,
        )
    path, delay_s = module.parse_spec(rest)
    script = module.read_script(module.script_path(path))
    return module.ScriptedModel(
        script.turns, name=spec, delay_s=delay_s, needs=script.needs, hint=script.hint, loop_from=script.loop_from
    )
