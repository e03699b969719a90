"""Environment for code kagent runs: without anything that looks like a credential.

Commands the model runs and solutions under evaluation must not see API keys: they could
print them into the trace or use them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kagent.core.providers import secret_prefixes

# Substrings (upper case) that mark a variable as a secret.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def is_secret_name(name: str) -> bool:
    """A secret's name, or one of a provider's variables (its key, endpoint, organisation: the
    prefixes kagent.core.providers states)."""
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or upper.startswith(secret_prefixes())


def scrubbed_env(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` without the variables :func:`is_secret_name` flags."""
    return {k: v for k, v in base.items() if not is_secret_name(k)}
