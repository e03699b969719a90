"""Environment for code kagent runs: without anything that looks like a credential.

Commands the model runs and solutions under evaluation must not see API keys: they could
print them into the trace or use them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Substrings (upper case) that mark a variable as a secret, and prefixes of providers' settings.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_")


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES)


def scrubbed_env(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` without the variables :func:`is_secret_name` flags."""
    return {k: v for k, v in base.items() if not is_secret_name(k)}
