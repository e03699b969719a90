"""What a provider's factory is given: the spec the user chose, its provider's entry
(kagent.core.providers) and the run's options, with what every factory asks of them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from kagent.agent.settings import REQUEST_TIMEOUT_S
from kagent.core.errors import ModelError
from kagent.core.providers import Provider, spec_forms


def bad_spec(spec: str, why: str) -> ModelError:
    return ModelError(f"bad model spec {spec!r}: {why}", hint="valid forms: " + ", ".join(spec_forms()))


@dataclass(frozen=True)
class ModelChoice:
    """A model spec taken apart, with the options of the run that talks to it."""

    spec: str  # the whole spec: the model's name in the trace
    provider: Provider
    rest: str  # what follows "provider:"
    timeout_s: float = REQUEST_TIMEOUT_S
    base_url: Optional[str] = None  # given: overrides the provider's base-URL variable
    thinking_budget: Optional[int] = None  # Anthropic extended thinking
    reasoning_effort: Optional[str] = None  # Anthropic adaptive thinking, or an OpenAI reasoning effort

    def api_key(self) -> str:
        """The provider's key from the environment; a provider whose key is optional gets "none"
        where it is not set, since the SDK insists on one."""
        variable = self.provider.key_variable
        key = os.environ.get(variable) if variable else None
        if key:
            return key
        if variable and self.provider.key_required:
            raise ModelError(f"no API key: set {variable}")
        return "none"

    def url(self) -> Optional[str]:
        """The endpoint: the one given, else the provider's variable, else the SDK's default (None)."""
        variable = self.provider.base_url_variable
        return self.base_url or (os.environ.get(variable) if variable else None) or None

    def bad(self, why: str) -> ModelError:
        return bad_spec(self.spec, why)
