"""The providers a model spec (``provider:model``) can name, each stated once: its factory, its
variables, whether kagent's tables speak for its models, and its help text.

A provider is one entry here and one module under kagent.agent.loop.models that holds its
factory. The entries live in core, below every layer, because more than the models read them:
the sandbox keeps each provider's variables away from executed code (sandbox/scrub.py), and the
run's settings and the command line describe the spec forms from them. The factory is named by
its import path, so that a provider's SDK is imported only when a run uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

# How a model that kagent's limits table does not know is asked to think, where the user asks
# for thinking: with a budget (anthropic extended thinking), or with an effort level.
AskedThinking = Literal["budget", "adaptive", "effort"]


@dataclass(frozen=True)
class Provider:
    """What kagent knows of one provider."""

    name: str  # the part of a spec before the first ':'
    # "module:function" that turns a ModelChoice (kagent.agent.loop.models.spec) into a ChatModel.
    factory: str
    package: str  # the pip package the factory's module needs, named when it is missing
    label: str  # what it is, in a few words (docs/models.md's table)
    # The spec forms it takes (the first is the usual one), and what each --model help says of it.
    forms: tuple[str, ...]
    about: str
    example: str  # a spec to show (docs/models.md's table)
    key_variable: Optional[str] = None  # the API key's variable
    key_required: bool = True  # False: the key is sent where it is set (a local server may want none)
    base_url_variable: Optional[str] = None  # the variable that moves its endpoint
    # kagent's built-in limits and price tables (agent/loop/models/limits.py, agent/loop/pricing.py)
    # speak for its models; a provider that is not hosted runs on the user's own hardware or
    # nowhere at all: it costs nothing, and its limits are the default unless models.yaml says.
    hosted: bool = True
    # How a model the limits table does not know is asked to think: (with --thinking N,
    # with --reasoning-effort).
    unknown_thinking: tuple[AskedThinking, AskedThinking] = ("effort", "effort")
    url_in_spec: bool = False  # the spec is <url>#<model>

    def model_of(self, rest: str) -> str:
        """The model's name in what follows ``provider:``."""
        return rest.rpartition("#")[2] if self.url_in_spec else rest

    @property
    def variables_prefix(self) -> Optional[str]:
        """The prefix its variables share (ANTHROPIC_ of ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL)."""
        return self.key_variable.partition("_")[0] + "_" if self.key_variable else None

    def key_text(self) -> str:
        """Which key it needs, in a few words."""
        if self.key_variable is None:
            return "none"
        return f"`{self.key_variable}`" if self.key_required else f"none needed (`{self.key_variable}` where set)"


_MODELS = "kagent.agent.loop.models"
PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(
            "anthropic",
            f"{_MODELS}.anthropic:from_choice",
            "anthropic",
            "Anthropic",
            ("anthropic:<model>",),
            "the Messages API",
            "anthropic:claude-opus-4-6",
            key_variable="ANTHROPIC_API_KEY",
            base_url_variable="ANTHROPIC_BASE_URL",
            unknown_thinking=("budget", "adaptive"),
        ),
        Provider(
            "openai",
            f"{_MODELS}.responses:from_choice",
            "openai",
            "OpenAI, through the Responses API",
            ("openai:<model>",),
            "the Responses API",
            "openai:gpt-5.6",
            key_variable="OPENAI_API_KEY",
            base_url_variable="OPENAI_BASE_URL",
        ),
        Provider(
            "openai-chat",
            f"{_MODELS}.openai:chat_from_choice",
            "openai",
            "OpenAI, through Chat Completions",
            ("openai-chat:<model>",),
            "Chat Completions",
            "openai-chat:gpt-5",
            key_variable="OPENAI_API_KEY",
            base_url_variable="OPENAI_BASE_URL",
        ),
        Provider(
            "openai-compatible",
            f"{_MODELS}.openai:compatible_from_choice",
            "openai",
            "an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama)",
            ("openai-compatible:<url>#<model>",),
            "a local server's Chat Completions",
            "openai-compatible:http://localhost:8000/v1#my-model",
            key_variable="OPENAI_API_KEY",
            key_required=False,
            hosted=False,
            url_in_spec=True,
        ),
        Provider(
            "scripted",
            f"{_MODELS}.scripted:from_choice",
            "pyyaml",
            "a scripted session, from a file or one kagent ships",
            (
                "scripted:<file>",
                "scripted:<name> (a session kagent ships: demo, sweep, megakernel)",
                "scripted:<file>?delay=<seconds>",
            ),
            "replayed turns; scripted:demo is a session kagent ships, no key needed",
            "scripted:demo",
            hosted=False,
        ),
    )
}


def provider_of(spec: str) -> Optional[Provider]:
    """The provider a spec names, or None (no ':', or a name kagent does not know)."""
    name, sep, _ = spec.partition(":")
    return PROVIDERS.get(name) if sep else None


def spec_forms() -> list[str]:
    """Every spec form, the providers' usual ones first."""
    usual = [p.forms[0] for p in PROVIDERS.values()]
    return usual + [form for p in PROVIDERS.values() for form in p.forms[1:]]


def model_help() -> str:
    """What --model takes: each provider's usual form, what it is and the key it reads."""
    parts = [
        f"{p.forms[0]} ({p.about}{'; ' + p.key_variable if p.key_variable and p.key_required else ''})"
        for p in PROVIDERS.values()
    ]
    return "; ".join(parts) + "."


def secret_prefixes() -> tuple[str, ...]:
    """The prefixes of the providers' variables (their keys and endpoints), each once."""
    return tuple(dict.fromkeys(p.variables_prefix for p in PROVIDERS.values() if p.variables_prefix))
