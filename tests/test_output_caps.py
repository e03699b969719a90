"""Full-size outputs: each model's output cap and thinking, through the real SDKs against the
loopback server; an answer the cap cuts, told to the model as such; files written in parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_models import _keys  # noqa: F401  (autouse: test keys, no base URLs from the environment)

from kagent.agent.lifecycle.runs import start_run
from kagent.agent.loop.models import make_model
from kagent.agent.loop.models.limits import (
    DEFAULT_LIMITS,
    ModelLimits,
    OutputSettings,
    limits_of,
    limits_warning,
    load_limits,
    output_settings,
)
from kagent.agent.settings import Budget, RunSettings
from kagent.agent.storage.trace import read_trace
from kagent.core.errors import KagentError
from kagent.core.messages import Message, TextBlock, ToolSpec
from kagent.sandbox.evaluate import EvalOptions
from kagent.tools import default_tools
from kagent.tools.base import ToolContext

from conftest import WAIT_S
from fake_llm_server import FakeLLMServer  # noqa: E402

TOOLS = [ToolSpec(name="write_file", description="Write a file", parameters={"type": "object"})]
# What the cap leaves of a write_file call: its JSON ends in the middle of the content.
CUT_JSON = '{"path": "solution.py", "content": "import torch\\n\\nclass Model(torch.nn.Module):\\n    def __ini'
KAGENT = str(Path(sys.executable).parent / "kagent")


def user(text: str) -> Message:
    return Message(role="user", content=[TextBlock(text=text)])


def url_of(provider: str, server: FakeLLMServer) -> str:
    return server.url if provider == "anthropic" else server.openai_url


# -- the table -------------------------------------------------------------------------------
M = 1_000_000
W = DEFAULT_LIMITS.context_window


@pytest.mark.parametrize(
    "spec, cap, thinking, window",
    [
        ("anthropic:claude-sonnet-4-5-20250929", 64_000, "budget", 200_000),
        ("anthropic:claude-opus-4-1-20250805", 32_000, "budget", 200_000),
        ("anthropic:claude-opus-4-5-20251101", 64_000, "budget", 200_000),
        ("anthropic:claude-haiku-4-5", 64_000, "budget", 200_000),
        ("anthropic:claude-opus-4-6", 128_000, "adaptive", M),
        ("anthropic:claude-sonnet-4-6", 128_000, "adaptive", M),
        ("anthropic:claude-sonnet-5", 128_000, "adaptive", M),
        ("anthropic:claude-opus-5-5", 128_000, "adaptive", M),
        ("anthropic:claude-3-5-haiku-latest", 8_192, "none", 200_000),
        ("openai:gpt-5.2", 128_000, "effort", 400_000),
        ("openai:gpt-5-mini", 128_000, "effort", 400_000),
        ("openai:gpt-5.4-mini", 128_000, "effort", 1_050_000),
        ("openai:gpt-5.6-terra", 128_000, "effort", 1_050_000),
        ("openai:gpt-5.6-luna", 128_000, "effort", 400_000),
        ("openai-chat:gpt-6", 128_000, "effort", 1_050_000),
        ("openai:gpt-5-chat-latest", 16_384, "none", 128_000),
        ("openai:gpt-4o-mini", 16_384, "none", 128_000),
        ("openai:o1-mini", 65_536, "effort", 128_000),
        ("openai:o3", 100_000, "effort", 200_000),
        # The table speaks for the hosted APIs only: a local server serving "gpt-5" is not one.
        ("openai-compatible:http://localhost:8000/v1#gpt-5", DEFAULT_LIMITS.max_output_tokens, "none", W),
        ("scripted:session.yaml", DEFAULT_LIMITS.max_output_tokens, "none", W),
        ("anthropic:claude-next", DEFAULT_LIMITS.max_output_tokens, "none", W),
    ],
)
def test_each_model_gets_its_own_cap_and_window(spec, cap, thinking, window):
    assert limits_of(spec, user={}) == ModelLimits(cap, thinking, window)


def test_a_model_the_table_does_not_know_is_told_what_was_assumed():
    warning = limits_warning("anthropic:claude-next", user={})
    assert warning is not None and warning.startswith("kagent does not know anthropic:claude-next: it assumes")
    assert "an output cap of 16,000 tokens, a context window of 200,000 tokens and no thinking" in warning
    assert limits_warning("openai:gpt-5.6-sol", user={}) is None
    # A local server or a script has no table to miss.
    assert limits_warning("openai-compatible:http://box/v1#qwen3", user={}) is None
    assert limits_warning("scripted:s.yaml", user={}) is None


def test_a_user_file_extends_and_overrides_the_table(user_home):
    (user_home / "models.yaml").write_text(
        "claude-sonnet-4-5: {max_output_tokens: 20000}\n"
        "qwen3-coder: {max_output_tokens: 32768, thinking: effort, context_window: 262144}\n"
    )
    try:
        user = load_limits()
        assert limits_of("anthropic:claude-sonnet-4-5", user) == ModelLimits(20_000, "budget")
        assert limits_of("anthropic:claude-sonnet-4-0", user) == ModelLimits(64_000, "budget")
        qwen = limits_of("openai-compatible:http://box:8000/v1#qwen3-coder-30b", user)
        assert qwen == ModelLimits(32_768, "effort", 262_144)
        for bad in (
            "gpt-5: {max_output_tokens: -1}\n",
            "gpt-5: {context_window: 0}\n",
            "gpt-5: {thinking: loud}\n",
            "gpt-5: {colour: red}\n",
            "- a list\n",
        ):
            (user_home / "models.yaml").write_text(bad)
            with pytest.raises(KagentError, match="malformed"):
                load_limits()
    finally:
        (user_home / "models.yaml").unlink()


@pytest.mark.parametrize(
    "spec, thinking, effort, cap, expected",
    [
        # Thinking is on by default where the model thinks.
        ("anthropic:claude-sonnet-4-5", None, None, None, OutputSettings(64_000, thinking_budget=32_000)),
        ("anthropic:claude-sonnet-4-5", "12000", None, None, OutputSettings(64_000, thinking_budget=12_000)),
        ("anthropic:claude-sonnet-4-5", "off", None, None, OutputSettings(64_000)),
        ("anthropic:claude-sonnet-4-5", False, None, 30_000, OutputSettings(30_000)),  # `thinking: off` in YAML
        ("anthropic:claude-opus-4-6", None, None, None, OutputSettings(128_000, reasoning_effort="high")),
        ("anthropic:claude-opus-4-6", "on", "max", None, OutputSettings(128_000, reasoning_effort="max")),
        ("openai:gpt-5.1", None, None, None, OutputSettings(128_000, reasoning_effort="high")),
        ("openai:gpt-5.1", None, "xhigh", None, OutputSettings(128_000, reasoning_effort="xhigh")),
        ("openai:gpt-5.1", "off", None, None, OutputSettings(128_000)),
        ("openai:gpt-4o", None, None, None, OutputSettings(16_384)),
        # Asked explicitly of a model the table does not know: its provider's form.
        ("anthropic:claude-next", 4000, None, None, OutputSettings(16_000, thinking_budget=4000)),
        ("anthropic:claude-next", None, "high", None, OutputSettings(16_000, reasoning_effort="high")),
        ("openai-compatible:http://box/v1#qwen3", None, "low", 8000, OutputSettings(8000, reasoning_effort="low")),
        ("scripted:x.yaml", None, None, None, OutputSettings(16_000)),
    ],
)
def test_output_settings(spec, thinking, effort, cap, expected):
    assert output_settings(spec, thinking, effort, cap, user={}) == expected


@pytest.mark.parametrize(
    "spec, thinking, effort, cap, message",
    [
        ("anthropic:claude-sonnet-4-5", "64000", None, None, "must lie between 1024 and 62976"),
        ("anthropic:claude-sonnet-4-5", "100", None, None, "must lie between"),
        ("anthropic:claude-sonnet-4-5", None, "high", None, "takes a thinking budget"),
        ("anthropic:claude-sonnet-4-5", None, None, 1500, "leaves no room to think"),
        ("openai:gpt-5", "8000", None, None, "takes a reasoning effort"),
        ("openai:gpt-5", "loud", None, None, "--thinking takes on, off or a budget"),
        ("openai:gpt-5", None, "extreme", None, "--reasoning-effort must be one of"),
        ("openai:gpt-5", "off", "high", None, "which --thinking off turns off"),
        ("openai:gpt-5", None, None, -5, "must be positive"),
    ],
)
def test_output_settings_refuse_what_the_model_cannot_take(spec, thinking, effort, cap, message):
    with pytest.raises(KagentError, match=message):
        output_settings(spec, thinking, effort, cap, user={})


# -- what the providers are sent --------------------------------------------------------------
def test_anthropic_adaptive_thinking_and_budget_clamped_to_the_cap():
    with FakeLLMServer([{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}]) as server:
        adaptive = make_model("anthropic:test-model", base_url=server.url, reasoning_effort="max")
        adaptive.complete("sys", [user("go")], TOOLS, 128_000)
        budget = make_model("anthropic:test-model", base_url=server.url, thinking_budget=50_000)
        budget.complete("sys", [user("go")], TOOLS, 20_000)
        budget.complete("sys", [user("go")], TOOLS, 1500)  # too small a turn to think in
        # --thinking off: no budget, no effort.
        make_model("anthropic:test-model", base_url=server.url).complete("sys", [user("go")], TOOLS, 64_000)
    first, second, third, off = server.requests
    assert "thinking" not in off and "output_config" not in off and off["max_tokens"] == 64_000
    assert first["thinking"] == {"type": "adaptive"} and first["output_config"] == {"effort": "max"}
    assert first["max_tokens"] == 128_000
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 20_000 - 1024}
    assert second["max_tokens"] == 20_000 and "output_config" not in second
    assert "thinking" not in third and third["max_tokens"] == 1500


def test_openai_reasoning_effort_is_sent():
    with FakeLLMServer([{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}]) as server:
        for provider in ("openai", "openai-chat"):
            make_model(f"{provider}:test-model", base_url=server.openai_url, reasoning_effort="high").complete(
                "sys", [user("go")], TOOLS, 128_000
            )
            make_model(f"{provider}:test-model", base_url=server.openai_url).complete("sys", [user("go")], TOOLS, 100)
    responses, responses_plain, chat, chat_plain = server.requests
    assert responses["reasoning"] == {"effort": "high"} and responses["max_output_tokens"] == 128_000
    assert "reasoning" not in responses_plain
    assert chat["reasoning_effort"] == "high"
    assert chat["max_completion_tokens"] == 128_000
    assert "reasoning_effort" not in chat_plain


@pytest.mark.parametrize(
    "provider, stop", [("anthropic", "max_tokens"), ("openai", "length"), ("openai-chat", "length")]
)
def test_a_call_the_cap_cuts_is_raw_even_without_any_json(provider, stop):
    turns = [
        {"tool_calls": [{"id": "c1", "name": "write_file", "arguments": CUT_JSON}], "stop_reason": stop},
        {"tool_calls": [{"id": "c2", "name": "write_file", "arguments": ""}], "stop_reason": stop},
        {"tool_calls": [{"id": "c3", "name": "write_file", "arguments": ""}]},
    ]
    with FakeLLMServer(turns) as server:
        model = make_model(f"{provider}:test-model", base_url=url_of(provider, server))
        cut, empty, whole = (model.complete("sys", [user("go")], TOOLS, 100) for _ in range(3))
    assert cut.stop_reason == empty.stop_reason == "max_tokens"
    assert cut.message.tool_calls()[0].arguments == {"_raw": CUT_JSON}
    assert empty.message.tool_calls()[0].arguments == {"_raw": ""}
    assert whole.message.tool_calls()[0].arguments == {}  # not cut: a call without arguments


# -- the loop: what the model is told -------------------------------------------------------------
def _options(tmp_path: Path, provider: str, **update) -> RunSettings:
    return RunSettings(
        task="02_kimi_linear_decode",
        model=f"{provider}:test-model",
        budget=Budget(wall_s=900),
        device="cpu",
        scale="smoke",
        runs_root=tmp_path / "runs",
        eval_timeout_s=WAIT_S,
        **update,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "provider, stop", [("anthropic", "max_tokens"), ("openai", "length"), ("openai-chat", "length")]
)
def test_a_cut_write_is_answered_with_how_to_write_in_parts(provider, stop, tmp_path):
    turns = [
        {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": CUT_JSON}], "stop_reason": stop},
        {
            "tool_calls": [
                {"id": "w2", "name": "write_file", "arguments": {"path": "notes.md", "content": "part one\n"}}
            ]
        },
        {
            "tool_calls": [
                {
                    "id": "w3",
                    "name": "write_file",
                    "arguments": {"path": "notes.md", "content": "part two\n", "append": True},
                }
            ]
        },
        {"tool_calls": [{"id": "done", "name": "finish", "arguments": {"summary": "wrote notes"}}]},
    ]
    with FakeLLMServer(turns) as server:
        options = _options(tmp_path, provider, max_output_tokens=16_000, thinking_budget=4_000)
        run_dir, report = start_run(
            options, model=make_model(options.model, base_url=url_of(provider, server), thinking_budget=4_000)
        )
    assert server.violations == []
    answered = json.dumps(server.requests[1].get("messages") or server.requests[1]["input"])
    assert "reached the output cap (16,000 tokens per answer, thinking included)" in answered
    assert "cut off after" in answered and "append=true" in answered and "not valid JSON" not in answered
    assert "parts of at most about 18 KB" in answered  # (16000 - 4000) tokens of room, 3 characters each, half
    assert (run_dir / "workspace" / "notes.md").read_text() == "part one\npart two\n"
    finished = [e for e in read_trace(run_dir / "trace.jsonl").events if e.type == "tool_finished"]
    assert "appended to notes.md" in finished[2].content


@pytest.mark.slow
def test_answers_the_cap_cuts_before_any_call_are_told_then_end_the_run(tmp_path):
    cut = {"thinking": "hmm " * 50, "stop_reason": "max_tokens"}
    with FakeLLMServer([cut, cut, cut]) as server:
        options = _options(tmp_path, "anthropic")
        run_dir, report = start_run(options, model=make_model(options.model, base_url=server.url))
    assert len(server.requests) == 3  # not ended by the first answer without a call
    told = json.dumps(server.requests[1]["messages"][-1])
    assert "reached the output cap" in told and "before it called any tool" in told
    assert report.status == "no_result"
    assert report.reason.startswith("the model's last 3 answers all reached the output cap (16,000 tokens)")


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.slow
def test_kagent_run_asks_for_the_cap_and_the_thinking_it_is_given(tmp_path):
    """The whole command once, both flags given: what they set is in the run's config and in the
    request. The defaults and --thinking off take the same path, from the flags' values on: the
    next test holds what load_settings makes of them."""
    finish = {"tool_calls": [{"id": "done", "name": "finish", "arguments": {"summary": "nothing to do"}}]}
    with FakeLLMServer([finish]) as server:
        env = {**os.environ, "ANTHROPIC_BASE_URL": server.url, "COLUMNS": "200"}
        proc = subprocess.run(
            [
                KAGENT,
                "run",
                "02_kimi_linear_decode",
                "--model",
                "anthropic:claude-sonnet-4-5",
                "--device",
                "cpu",
                "--budget",
                "20m",
                "--quiet",
                "--max-output-tokens",
                "20000",
                "--thinking",
                "5000",
            ],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            env=env,
            cwd=tmp_path,
        )
    assert proc.returncode == 3, proc.stderr  # finished with no result
    (run_dir,) = (tmp_path / "runs").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["max_output_tokens"] == 20_000 and config["thinking_budget"] == 5000
    body = server.requests[0]
    assert body["max_tokens"] == 20_000 and body.get("thinking") == {"type": "enabled", "budget_tokens": 5000}


@pytest.mark.parametrize(
    "flags, cap, budget",
    [
        ({}, 64_000, 32_000),
        ({"thinking": "off"}, 64_000, None),
        ({"max_output_tokens": 20_000, "thinking": "5000"}, 20_000, 5000),
    ],
)
def test_the_run_s_settings_take_the_models_own_cap_and_think_by_default(flags, cap, budget):
    from kagent.agent.cli.config import load_settings

    settings = load_settings("02_kimi_linear_decode", None, {"model": "anthropic:claude-sonnet-4-5", **flags})
    assert (settings.max_output_tokens, settings.thinking_budget) == (cap, budget)


# -- write_file in parts ------------------------------------------------------------------------
def test_write_file_appends(tmp_path, kimi, kagent_home):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(workspace=workspace, task=kimi, eval_options=EvalOptions(device="cpu", cache_dir=kagent_home))
    write = next(t for t in default_tools() if t.spec.name == "write_file")
    assert "created big.py" in write.run({"path": "big.py", "content": "a = 1\n", "append": True}, ctx).content
    out = write.run({"path": "big.py", "content": "b = 2\n", "append": True}, ctx)
    assert out.content == "appended to big.py (6 bytes added; now 2 lines, 12 bytes)" and out.data["appended"]
    assert (workspace / "big.py").read_text() == "a = 1\nb = 2\n"
    assert "overwrote big.py" in write.run({"path": "big.py", "content": "c = 3\n"}, ctx).content
    assert (workspace / "big.py").read_text() == "c = 3\n"
