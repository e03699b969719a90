"""The one error type users see: a clear message at the CLI boundary, no traceback."""

from __future__ import annotations

# The exit code of bad usage (nothing was started): a KagentError's, unless it says otherwise, and
# click's for a mistake on the command line.
EXIT_USAGE = 2


class KagentError(Exception):
    """Something the user can fix (a bad path, a missing GPU, a task that does not load).

    The CLI prints ``message`` (and ``hint`` when given) and exits non-zero; with
    KAGENT_DEBUG=1 it re-raises so the traceback is there for a bug report.
    """

    def __init__(self, message: str, hint: str = "", exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code


class ModelError(KagentError):
    """The model provider refused for good (bad key, unknown model, malformed request)."""


class TransientModelError(Exception):
    """A provider failure worth retrying: 429, 529 overloaded, 5xx, a timeout, a dropped
    connection, an error event in the middle of a stream. ``retry_after`` is the provider's
    hint in seconds, when it gave one."""

    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status
