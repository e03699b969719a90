"""expect: pass

Looks for the model provider's key in its environment, which the harness must have scrubbed.
"""
import os

_leaked = sorted(k for k in os.environ if k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MY_SERVICE_TOKEN"))
assert not _leaked, f"the solution can read {_leaked}"
