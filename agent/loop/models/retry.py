"""Retrying transient provider failures, and deciding which failures are transient.

Providers only translate their SDK's exceptions into kagent's two error types (through
:func:`status_error`); this wrapper owns every retry, so the SDKs run with retries off and
the wait between attempts is visible to the loop (``on_retry``) and bounded by its budget
(``remaining_s``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Optional

from kagent.core.errors import ModelError, TransientModelError
from kagent.core.messages import Message, ModelResponse, ToolSpec

# Statuses worth another attempt: request timeout, conflict (a concurrent request), rate
# limits, server errors and Anthropic's 529 "overloaded" (covered by >= 500).
_TRANSIENT_STATUSES = {408, 409, 429}


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``retry-after`` header; None when absent or in HTTP-date form."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(seconds, 0.0)


def status_error(
    service: str, status: int, detail: str, *, model: str, key_env: str, retry_after: Optional[float] = None
) -> Exception:
    """The kagent error for an HTTP error status from ``service`` (e.g. "the Anthropic API").

    Transient statuses give a TransientModelError; the rest a ModelError whose message says
    what the user should fix, since retrying them can only fail the same way.
    """
    if status in _TRANSIENT_STATUSES or status >= 500:
        return TransientModelError(f"{service} failed with {status}: {detail}", retry_after, status)
    if status == 401:
        return ModelError(f"{service} refused the key (401): {detail}", hint=f"check {key_env}" if key_env else "")
    if status == 403:
        return ModelError(
            f"{service} denied access (403): {detail}",
            hint=f"check the permissions of the key in {key_env}" if key_env else "",
        )
    if status == 404 and "model" in detail.lower():
        return ModelError(
            f"unknown model {model!r} at {service} (404): {detail}", hint="check the model name in the model spec"
        )
    return ModelError(f"{service} rejected the request ({status}): {detail}")


class RetryingModel:
    """A ChatModel that retries its inner model's TransientModelErrors with backoff.

    The wait is ``retry_after`` when the provider gave one, else exponential backoff with
    jitter (so that many clients throttled together do not return together); both are capped
    by ``max_delay_s``. A wait that would outlast ``remaining_s()`` is not started: the error
    is raised instead, since the run could not use an answer that came after its budget.
    ModelError is permanent and passes straight through.
    """

    def __init__(
        self,
        inner,
        *,
        max_attempts: int = 8,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        remaining_s: Optional[Callable[[], float]] = None,
        on_retry: Optional[Callable[[TransientModelError, float, int], None]] = None,
        rng: Optional[random.Random] = None,
    ):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.inner = inner
        self.name: str = inner.name
        self.max_attempts = max_attempts
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._sleep = sleep
        self._remaining_s = remaining_s
        self._on_retry = on_retry
        self._rng = rng or random.Random()

    def wait_for(self, error: TransientModelError, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_delay_s)
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        # Jitter within the upper half keeps the backoff growing while spreading clients out.
        return backoff * self._rng.uniform(0.5, 1.0)

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelResponse:
        attempt = 1
        while True:
            try:
                return self.inner.complete(system, messages, tools, max_tokens)
            except TransientModelError as error:
                if attempt >= self.max_attempts:
                    raise
                wait = self.wait_for(error, attempt)
                if self._remaining_s is not None and wait > self._remaining_s():
                    raise
                if self._on_retry is not None:
                    self._on_retry(error, wait, attempt)
                self._sleep(wait)
                attempt += 1
