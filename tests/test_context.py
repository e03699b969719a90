"""The context meter: the prompt's size from the service's count, when to compact, and the
answer's cap clamped so that prompt and answer fit the window."""

from __future__ import annotations

from kagent.agent.loop.context import ContextMeter, estimate_tokens, user_limit
from kagent.agent.settings import RunConfig
from kagent.core.messages import Message, TextBlock, Usage


def said(text: str, role: str = "user") -> Message:
    return Message(role=role, content=[TextBlock(text=text)])  # type: ignore[arg-type]


def test_a_200k_window_with_a_64k_cap_compacts_before_the_two_would_pass_it():
    meter = ContextMeter(200_000, 64_000)
    assert meter.margin == 10_000 and meter.compact_above == 126_000
    assert not meter.over(126_000) and meter.over(126_001)
    assert meter.answer_cap(126_000) == 64_000  # both fit, with the margin
    assert meter.answer_cap(150_000) == 40_000  # too large a prompt: the answer gives way
    assert meter.answer_cap(199_000) == 1_024  # never below what a tool call needs


def test_a_1m_window_compacts_late():
    assert ContextMeter(1_000_000, 128_000).compact_above == 822_000


def test_the_user_s_own_limit_wins_only_where_lower():
    assert ContextMeter(200_000, 64_000, limit=6_000).compact_above == 6_000
    assert ContextMeter(200_000, 64_000, limit=500_000).compact_above == 126_000
    config = RunConfig.model_validate({**_config(), "context_limit_tokens": 6_000})
    assert user_limit(config) == 6_000
    assert user_limit(RunConfig.model_validate(_config())) is None  # the default is no user's choice


def _config() -> dict:
    return {"run_id": "r", "task": "t", "model": "anthropic:claude-opus-4-6", "device": "cpu", "scale": "smoke"}


def test_the_size_is_the_service_s_count_plus_what_came_since():
    meter = ContextMeter(200_000, 64_000)
    messages = [said("x" * 3_000)]
    estimate = estimate_tokens(messages, "s" * 300)
    assert meter.size(messages, "s" * 300, []) == estimate and 1_100 < estimate < 1_150  # 3 characters a token
    # The service counted 5,000 tokens for that one-message request (code tokenizes densely).
    meter.counted(Usage(input_tokens=1_000, cache_read_tokens=3_500, cache_write_tokens=500, output_tokens=9), 1)
    messages += [said("y" * 600, "assistant"), said("z" * 900)]
    assert meter.size(messages, "s" * 300, []) == 5_000 + estimate_tokens(messages[1:])
    meter.forget()  # compacted: the count is of a conversation that is gone
    assert meter.size(messages, "s" * 300, []) == estimate_tokens(messages, "s" * 300)
    meter.counted(Usage(), 3)  # a server that counts nothing leaves the estimate
    assert meter.size(messages, "", []) == estimate_tokens(messages)
