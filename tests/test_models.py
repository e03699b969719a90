"""Model providers through the real SDK clients against a loopback server, plus the retry
wrapper, scripted models and pricing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from kagent.agent.loop.models import make_model
from kagent.agent.loop.models.anthropic import to_anthropic_messages
from kagent.agent.loop.models.retry import RetryingModel
from kagent.agent.loop.models.scripted import ScriptedModel, load_script, read_script
from kagent.agent.loop.pricing import BUILTIN_PRICES, cost, load_prices, price_known
from kagent.core.errors import ModelError, TransientModelError
from kagent.core.messages import Message, ModelResponse, TextBlock, ThinkingBlock, ToolCall, ToolResult, ToolSpec, Usage

from fake_llm_server import BAD_KEY, UNKNOWN_MODEL, FakeLLMServer, anthropic_violations, openai_violations  # noqa: E402

TOOLS = [
    ToolSpec(name="run", description="Run a command", parameters={"type": "object"}),
    ToolSpec(name="read", description="Read a file", parameters={"type": "object"}),
]
USAGE = {"input": 100, "output": 40, "cache_read": 30, "cache_write": 20, "reasoning": 7}
# openai: the Responses API; openai-chat: an OpenAI model through chat.completions.
PROVIDERS = ["anthropic", "openai", "openai-chat"]


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def model_for(provider: str, server: FakeLLMServer, model: str = "test-model", **kwargs):
    url = server.url if provider == "anthropic" else server.openai_url
    return make_model(f"{provider}:{model}", base_url=url, **kwargs)


def user(text: str) -> Message:
    return Message(role="user", content=[TextBlock(text=text)])


def no_sleep(_seconds: float) -> None:
    pass


# --- turns ----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_turn(provider):
    with FakeLLMServer([{"text": "Hello, kernel."}]) as server:
        model = model_for(provider, server)
        response = model.complete("You optimize kernels.", [user("hi")], TOOLS, 1000)
    assert model.name == f"{provider}:test-model"
    assert response.message == Message(role="assistant", content=[TextBlock(text="Hello, kernel.")])
    assert response.stop_reason == "end_turn"
    assert response.model == "test-model"
    assert response.request_id == "req_fake"
    assert response.raw["id"] in ("msg_0", "chatcmpl-0", "resp_0")
    body = server.requests[0]
    assert body["stream"] is True
    if provider == "anthropic":
        assert body["max_tokens"] == 1000 and body["messages"][0]["role"] == "user"
    elif provider == "openai":
        assert body["max_output_tokens"] == 1000 and body["instructions"] == "You optimize kernels."
        assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
        assert body["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    else:
        assert body["max_completion_tokens"] == 1000
        assert body["messages"][0] == {"role": "system", "content": "You optimize kernels."}
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_call_turn_and_result_round_trip(provider):
    calls = [
        {"id": "tu_1", "name": "run", "arguments": {"cmd": "nvcc -O3 k.cu", "timeout": 30}},
        {"id": "tu_2", "name": "read", "arguments": "{not json"},
    ]
    with FakeLLMServer([{"text": "Let me check.", "tool_calls": calls}, {"text": "done"}]) as server:
        model = model_for(provider, server)
        first = model.complete("sys", [user("go")], TOOLS, 500)
        assert first.stop_reason == "tool_use"
        assert first.message.tool_calls() == [
            ToolCall(id="tu_1", name="run", arguments={"cmd": "nvcc -O3 k.cu", "timeout": 30}),
            ToolCall(id="tu_2", name="read", arguments={"_raw": "{not json"}),
        ]
        results = Message(
            role="user",
            content=[
                ToolResult(tool_call_id="tu_1", content="ok"),
                ToolResult(tool_call_id="tu_2", content="bad args", is_error=True),
            ],
        )
        second = model.complete("sys", [user("go"), first.message, results], TOOLS, 500)
    assert second.message.text() == "done"
    assert server.violations == []
    if provider == "openai":
        items = server.requests[1]["input"]
        assert [i.get("type", i.get("role")) for i in items] == [
            "user",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
        ]
        assert json.loads(items[2]["arguments"]) == calls[0]["arguments"] and items[2]["call_id"] == "tu_1"
        assert items[5] == {"type": "function_call_output", "call_id": "tu_2", "output": "Error: bad args"}
        return
    sent = server.requests[1]["messages"]
    if provider == "anthropic":
        assert [b["type"] for b in sent[1]["content"]] == ["text", "tool_use", "tool_use"]
        answers = [(b["tool_use_id"], b["is_error"]) for b in sent[2]["content"]]
        assert answers == [("tu_1", False), ("tu_2", True)]
    else:
        assert [c["id"] for c in sent[2]["tool_calls"]] == ["tu_1", "tu_2"]
        assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == calls[0]["arguments"]
        assert [(m["role"], m["tool_call_id"]) for m in sent[3:]] == [("tool", "tu_1"), ("tool", "tu_2")]
        assert sent[4]["content"].startswith("Error: ")


def test_anthropic_thinking_is_sent_back_exactly():
    turns = [
        {
            "thinking": "The loop is memory bound.",
            "signature": "EqQBCkYIARgCKkD+/==",
            "redacted": "opaque-redacted-bytes",
            "tool_calls": [{"id": "tu_1", "name": "run", "arguments": {}}],
        },
        {"text": "ok"},
    ]
    with FakeLLMServer(turns) as server:
        model = model_for("anthropic", server, thinking_budget=2048)
        first = model.complete("sys", [user("go")], TOOLS, 8000)
        assert first.message.content[:2] == [
            ThinkingBlock(thinking="The loop is memory bound.", signature="EqQBCkYIARgCKkD+/=="),
            ThinkingBlock(redacted_data="opaque-redacted-bytes"),
        ]
        results = Message(role="user", content=[ToolResult(tool_call_id="tu_1", content="ran")])
        model.complete("sys", [user("go"), first.message, results], TOOLS, 8000)
    # The output cap holds the thinking: the budget is carved out of it, not added to it.
    assert server.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert server.requests[0]["max_tokens"] == 8000
    assert server.requests[1]["messages"][1]["content"][:2] == [
        {"type": "thinking", "thinking": "The loop is memory bound.", "signature": "EqQBCkYIARgCKkD+/=="},
        {"type": "redacted_thinking", "data": "opaque-redacted-bytes"},
    ]
    assert server.violations == []


def test_openai_chat_drops_thinking_and_reads_reasoning_content():
    with FakeLLMServer([{"thinking": "step by step", "text": "a"}, {"text": "b"}]) as server:
        model = model_for("openai-chat", server)
        first = model.complete("", [user("go")], [], 100)
        assert first.message.content == [ThinkingBlock(thinking="step by step"), TextBlock(text="a")]
        model.complete("", [user("go"), first.message, user("more")], [], 100)
    assert server.requests[1]["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "more"},
    ]


def test_anthropic_prompt_caching_markers():
    conversation = [
        user("first"),
        Message(role="assistant", content=[TextBlock(text="reply")]),
        Message(role="user", content=[TextBlock(text="second"), TextBlock(text="latest")]),
    ]
    with FakeLLMServer([{"text": "ok"}]) as server:
        model_for("anthropic", server).complete("system prompt", conversation, TOOLS, 100)
    body = server.requests[0]
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "system prompt", "cache_control": ephemeral}]
    assert [t.get("cache_control") for t in body["tools"]] == [None, ephemeral]
    marked = [
        (i, j) for i, m in enumerate(body["messages"]) for j, b in enumerate(m["content"]) if "cache_control" in b
    ]
    assert marked == [(2, 1)]


def test_anthropic_merges_consecutive_user_messages_results_first():
    calls = [ToolCall(id="a", name="run"), ToolCall(id="b", name="run")]
    messages = [
        user("go"),
        Message(role="assistant", content=calls),
        Message(role="user", content=[ToolResult(tool_call_id="a", content="1")]),
        Message(role="user", content=[TextBlock(text="note"), ToolResult(tool_call_id="b", content="2")]),
    ]
    sent = to_anthropic_messages(messages)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert anthropic_violations(sent) == []


# --- usage ----------------------------------------------------------------------------------


def test_anthropic_usage():
    with FakeLLMServer([{"text": "x", "usage": USAGE}]) as server:
        usage = model_for("anthropic", server).complete("", [user("q")], [], 100).usage
    # output_tokens comes from message_delta (cumulative), not added to message_start's 1.
    assert usage == Usage(input_tokens=100, output_tokens=40, cache_read_tokens=30, cache_write_tokens=20)


@pytest.mark.parametrize("provider", ["openai", "openai-chat"])
def test_openai_usage_subtracts_cached_and_keeps_reasoning(provider):
    with FakeLLMServer([{"text": "x", "usage": USAGE}]) as server:
        usage = model_for(provider, server).complete("", [user("q")], [], 100).usage
    assert usage == Usage(input_tokens=100, output_tokens=40, cache_read_tokens=30, reasoning_tokens=7)


def test_openai_compatible_without_usage_chunk(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeLLMServer([{"text": "local", "usage": USAGE}], send_usage=False) as server:
        spec = f"openai-compatible:{server.openai_url}#qwen3-coder"
        model = make_model(spec)
        response = model.complete("", [user("q")], [], 64)
    assert model.name == spec
    assert response.message.text() == "local" and response.usage == Usage()
    assert server.requests[0]["model"] == "qwen3-coder" and server.requests[0]["max_tokens"] == 64
    assert server.headers[0]["authorization"] == "Bearer none"


def test_openai_stream_without_usage_is_cut():
    """Only compatible servers may omit usage; from the OpenAI API that means a cut stream."""
    with FakeLLMServer([{"text": "x"}], send_usage=False) as server:
        with pytest.raises(TransientModelError, match="before its usage"):
            model_for("openai-chat", server).complete("", [user("q")], [], 10)


# --- faults and retries ---------------------------------------------------------------------

FAULT_MESSAGES = {
    "429": "failed with 429: slow down",
    "529": "failed with 529: Overloaded",
    "500": "failed with 500: Internal server error",
    "cut": "stream ended before",
    "error_event": "error mid-stream",
    "slow": "timed out",
    "reset": "connection failed",
}


@pytest.mark.parametrize("fault", sorted(FAULT_MESSAGES))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_transient_fault_is_retried_and_usage_counted_once(provider, fault):
    retries = []
    with FakeLLMServer([{"text": "recovered", "usage": USAGE}], faults={0: fault}, slow_s=1.5) as server:
        model = RetryingModel(
            model_for(provider, server, timeout_s=0.5),
            sleep=no_sleep,
            on_retry=lambda error, wait, attempt: retries.append((error, wait, attempt)),
        )
        response = model.complete("", [user("q")], [], 100)
    assert response.message.text() == "recovered"
    assert response.usage.output_tokens == 40
    assert len(server.requests) == 2 and server.served == 1
    [(error, wait, attempt)] = retries
    assert isinstance(error, TransientModelError) and attempt == 1
    assert FAULT_MESSAGES[fault] in str(error)
    if fault == "429":
        assert error.status == 429 and error.retry_after == 0 and wait == 0
    elif fault in ("529", "500"):
        assert error.status == int(fault)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_bad_key_is_permanent(provider, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY", BAD_KEY)
    with FakeLLMServer([{"text": "never"}]) as server:
        model = RetryingModel(model_for(provider, server), sleep=no_sleep)
        with pytest.raises(ModelError, match=r"refused the key \(401\)") as info:
            model.complete("", [user("q")], [], 10)
    assert len(server.requests) == 1
    assert ("ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY") in info.value.hint


@pytest.mark.parametrize("provider", PROVIDERS)
def test_unknown_model_is_permanent(provider):
    with FakeLLMServer([{"text": "never"}]) as server:
        model = RetryingModel(model_for(provider, server, model=UNKNOWN_MODEL), sleep=no_sleep)
        with pytest.raises(ModelError, match=f"unknown model '{UNKNOWN_MODEL}'"):
            model.complete("", [user("q")], [], 10)
    assert len(server.requests) == 1


class Flaky:
    """A ChatModel failing transiently ``failures`` times before answering."""

    name = "flaky:model"

    def __init__(self, failures: int, retry_after: float | None = None):
        self.failures, self.retry_after, self.calls = failures, retry_after, 0

    def complete(self, system, messages, tools, max_tokens) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientModelError("busy", retry_after=self.retry_after, status=529)
        return ModelResponse(
            message=Message(role="assistant", content=[]), stop_reason="end_turn", usage=Usage(), model="m"
        )


def test_retry_backoff_grows_with_jitter_and_is_capped():
    waits: list[float] = []
    model = RetryingModel(Flaky(6), base_delay_s=1.0, max_delay_s=10.0, sleep=waits.append)
    model.complete("", [], [], 1)
    assert model.name == "flaky:model" and len(waits) == 6
    for attempt, wait in enumerate(waits, start=1):
        ceiling = min(10.0, 2.0 ** (attempt - 1))
        assert ceiling / 2 <= wait <= ceiling


def test_retry_after_is_honoured_and_capped():
    waits: list[float] = []
    RetryingModel(Flaky(1, retry_after=7.0), sleep=waits.append).complete("", [], [], 1)
    RetryingModel(Flaky(1, retry_after=500.0), max_delay_s=60.0, sleep=waits.append).complete("", [], [], 1)
    assert waits == [7.0, 60.0]


def test_retry_never_waits_past_the_budget():
    waits: list[float] = []
    inner = Flaky(10, retry_after=30.0)
    model = RetryingModel(inner, sleep=waits.append, remaining_s=lambda: 29.0)
    with pytest.raises(TransientModelError):
        model.complete("", [], [], 1)
    assert waits == [] and inner.calls == 1


def test_retry_gives_up_after_max_attempts():
    inner = Flaky(10)
    with pytest.raises(TransientModelError):
        RetryingModel(inner, max_attempts=3, sleep=no_sleep).complete("", [], [], 1)
    assert inner.calls == 3


def test_model_error_is_not_retried():
    model = RetryingModel(ScriptedModel([]), sleep=no_sleep)
    with pytest.raises(ModelError, match="no more turns"):
        model.complete("", [], [], 1)
    assert len(model.inner.calls) == 1


# --- the fake server's own protocol checks ----------------------------------------------------


def test_fake_server_flags_unanswered_and_orphaned_tool_calls():
    assistant = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "run", "input": {}}]}
    assert anthropic_violations([{"role": "user", "content": "q"}, assistant]) != []
    assert (
        anthropic_violations(
            [
                {"role": "user", "content": "q"},
                assistant,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "x"}]},
            ]
        )
        != []
    )
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
    }
    assert openai_violations([{"role": "user", "content": "q"}, call, {"role": "user", "content": "x"}]) != []
    assert (
        openai_violations([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "a", "content": "x"}])
        != []
    )
    assert (
        openai_violations(
            [{"role": "user", "content": "q"}, call, {"role": "tool", "tool_call_id": "a", "content": "x"}]
        )
        == []
    )


# --- scripted models ------------------------------------------------------------------------


def test_scripted_short_form_yaml(tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text("""
- thinking: plan
  text: Reading the kernel.
  tool_calls:
    - {name: read, arguments: {path: k.cu}}
    - {name: run, arguments: {cmd: make}, id: mine}
  usage: {input_tokens: 5, output_tokens: 2}
- text: Done.
""")
    model = make_model(f"scripted:{script}")
    first = model.complete("", [user("a")], TOOLS, 10)
    assert model.name == f"scripted:{script}"
    assert first.stop_reason == "tool_use" and first.usage == Usage(input_tokens=5, output_tokens=2)
    assert first.message.content[:2] == [ThinkingBlock(thinking="plan"), TextBlock(text="Reading the kernel.")]
    assert [(c.id, c.name, c.arguments) for c in first.message.tool_calls()] == [
        ("call_0_0", "read", {"path": "k.cu"}),
        ("mine", "run", {"cmd": "make"}),
    ]
    second = model.complete("", [user("b")], TOOLS, 10)
    assert second.stop_reason == "end_turn" and second.message.text() == "Done."
    assert [m[0].text() for m in model.calls] == ["a", "b"]
    with pytest.raises(ModelError, match="the script has no more turns"):
        model.complete("", [], [], 10)


def test_scripted_full_responses_json(tmp_path):
    full = ModelResponse(
        message=Message(role="assistant", content=[TextBlock(text="hi")]),
        stop_reason="max_tokens",
        usage=Usage(output_tokens=3),
        model="claude-x",
    )
    script = tmp_path / "script.json"
    script.write_text(json.dumps([full.model_dump(mode="json"), {"text": "short"}]))
    assert load_script(script)[0] == full
    assert load_script(script)[1].message.text() == "short"


def test_a_script_may_say_it_needs_a_gpu_and_take_a_file_s_text(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.py").write_text("KERNEL = 1\n")
    script = tmp_path / "gpu.yaml"
    script.write_text(
        "needs: cuda\nhint: run demo.yaml here\nturns:\n"
        "- tool_calls: [{name: write_file, arguments: {path: k.py, content: !file kernels/k.py}}]\n"
    )
    model = make_model(f"scripted:{script}")
    assert (model.needs, model.hint) == ("cuda", "run demo.yaml here")
    (call,) = model.complete("", [user("a")], TOOLS, 10).message.tool_calls()
    assert call.arguments == {"path": "k.py", "content": "KERNEL = 1\n"}
    (tmp_path / "plain.yaml").write_text("- text: hi\n")
    assert make_model(f"scripted:{tmp_path / 'plain.yaml'}").needs is None
    script.write_text("turns:\n- tool_calls: [{name: w, arguments: {content: !file kernels/missing.py}}]\n")
    with pytest.raises(ModelError, match="!file kernels/missing.py: cannot read"):
        load_script(script)
    for bad in ("needs: tpu\nturns: []\n", "needs: cuda\nhint: [a, b]\nturns: []\n", "needs: cuda\n"):
        script.write_text(bad)
        with pytest.raises(ModelError, match="may hold needs \\(one of cuda\\)"):
            load_script(script)


def test_a_looping_script_plays_its_laps_until_the_budget_ends_it(tmp_path):
    script = tmp_path / "loop.yaml"
    script.write_text(
        "loop_from: 1\nturns:\n- text: first\n"
        "- tool_calls: [{name: design, arguments: {}}]\n- tool_calls: [{name: check, arguments: {}}]\n"
    )
    model = make_model(f"scripted:{script}")
    answers = [model.complete("", [user("a")], TOOLS, 10).message for _ in range(7)]
    assert [a.tool_calls()[0].name if a.tool_calls() else a.text() for a in answers] == [
        "first",
        "design",
        "check",
        "design",
        "check",
        "design",
        "check",
    ]
    ids = [a.tool_calls()[0].id for a in answers[1:]]
    assert ids == ["call_1_0", "call_2_0", "call_1_0_lap1", "call_2_0_lap1", "call_1_0_lap2", "call_2_0_lap2"]
    # A resumed run goes on from the turn after its last answered one, laps included.
    resumed = make_model(f"scripted:{script}")
    resumed.start_at = 5
    assert resumed.complete("", [user("a")], TOOLS, 10).message.tool_calls()[0].id == "call_1_0_lap2"
    # Without loop_from a script still runs out.
    plain = ScriptedModel(load_script(script))
    for _ in range(3):
        plain.complete("", [user("a")], TOOLS, 10)
    with pytest.raises(ModelError, match="no more turns"):
        plain.complete("", [user("a")], TOOLS, 10)
    for bad in (
        "loop_from: 3\nturns: [{text: a}]\n",
        "loop_from: -1\nturns: [{text: a}]\n",
        "loop_from: '0'\nturns: [{text: a}]\n",
        "loop_from: true\nturns: [{text: a}]\n",
    ):
        script.write_text(bad)
        with pytest.raises(ModelError, match="loop_from must be the index of one of its 1 turns"):
            load_script(script)


def test_the_sweep_session_loops_over_whole_attempts():
    """examples/sweep_session.yaml: a baseline, a port, then laps of five turns that each end
    in a benchmark, every lap's edit one that applies whatever was kept or reverted."""
    script = read_script(Path(__file__).resolve().parents[1] / "examples" / "sweep_session.yaml")
    assert script.needs is None and script.loop_from == 2
    lap = [[c.name for c in t.message.tool_calls()] for t in script.turns[script.loop_from :]]
    assert lap == [["design"], ["read_file"], ["shell"], ["check"], ["benchmark"]]
    (edit,) = script.turns[script.loop_from + 2].message.tool_calls()
    assert edit.arguments["command"].startswith("echo ") and ">> solution.py" in edit.arguments["command"]
    assert [c.name for c in script.turns[0].message.tool_calls()] == ["baseline"]


def test_the_megakernel_session_plays_kagent_s_own_kernel_and_its_edits_apply():
    """examples/megakernel_session.yaml: its files are the example kernel's, and every edit it
    makes finds the text it replaces, once, in the file as the session left it."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    script = read_script(examples / "megakernel_session.yaml")
    assert script.needs == "cuda" and "--model scripted:demo" in (script.hint or "")
    files: dict[str, str] = {"solution.py": "(the port)"}
    edits = 0
    for turn in script.turns:
        for call in turn.message.tool_calls():
            args = call.arguments
            if call.name == "write_file":
                files[args["path"]] = args["content"]
            elif call.name == "edit_file":
                assert files[args["path"]].count(args["old"]) == 1, args["old"]
                files[args["path"]] = files[args["path"]].replace(args["old"], args["new"])
                edits += 1
    kernel = examples / "02_kimi_linear_decode"
    assert files["megakernel.py"] == (kernel / "megakernel.py").read_text() and edits == 4
    names = [c.name for t in script.turns for c in t.message.tool_calls()]
    assert names[0] == "baseline" and names[-1] == "finish" and names.count("benchmark") == 4


def test_scripted_bad_script(tmp_path):
    script = tmp_path / "bad.yaml"
    script.write_text("- {txt: typo}\n")
    with pytest.raises(ModelError, match="unknown keys"):
        load_script(script)
    with pytest.raises(ModelError, match="cannot read"):
        load_script(tmp_path / "missing.yaml")


# --- pricing --------------------------------------------------------------------------------


def test_cost_of_hosted_models_by_longest_prefix():
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_tokens=1_000_000,
        cache_write_tokens=1_000_000,
        reasoning_tokens=500_000,
    )
    assert cost("anthropic:claude-sonnet-4-5-20250929", usage) == pytest.approx(3 + 15 + 0.30 + 3.75)
    assert cost("anthropic:claude-opus-4-5", usage) == pytest.approx(5 + 25 + 0.5 + 6.25)
    assert cost("anthropic:claude-opus-4-1", usage) == pytest.approx(15 + 75 + 1.5 + 18.75)
    # Reasoning tokens are inside output_tokens and not charged again.
    assert cost("openai:gpt-5-mini", usage) == pytest.approx(0.25 + 2 + 0.025)
    assert cost("gpt-5", usage) == pytest.approx(1.25 + 10 + 0.125)
    assert price_known("openai:o4-mini") and price_known("anthropic:claude-haiku-4-5")


@pytest.mark.parametrize(
    "spec, dollars",
    [
        # claude-opus-4-6 and later cost a third of claude-opus-4 (models/opus-4-6: $5 / $25).
        ("anthropic:claude-opus-4-6", 5 + 25 + 0.5 + 6.25),
        ("anthropic:claude-opus-4-8", 5 + 25 + 0.5 + 6.25),
        ("anthropic:claude-opus-5", 5 + 25 + 0.5 + 6.25),
        ("anthropic:claude-opus-5-5", 4 + 20 + 0.2 + 5),
        ("anthropic:claude-sonnet-5-5", 2 + 10 + 0.2 + 2.5),
        ("anthropic:claude-sonnet-4-6", 3 + 15 + 0.3 + 3.75),
        ("openai:gpt-5.6-terra", 2.5 + 15 + 0.25),
        ("openai-chat:gpt-5.5", 5 + 30 + 0.5),
    ],
)
def test_current_models_cost_their_list_price(spec, dollars):
    million = Usage(input_tokens=10**6, output_tokens=10**6, cache_read_tokens=10**6, cache_write_tokens=10**6)
    assert cost(spec, million, BUILTIN_PRICES) == pytest.approx(dollars)


def test_local_scripted_and_unknown_models():
    usage = Usage(input_tokens=10**6, output_tokens=10**6)
    assert cost("openai-compatible:http://localhost:8000/v1#gpt-5", usage) == 0
    assert cost("scripted:/tmp/s.yaml", usage) == 0
    assert price_known("openai-compatible:http://localhost:8000/v1#x") and price_known("scripted:s.yaml")
    assert cost("openai:brand-new-model", usage) == 0 and not price_known("openai:brand-new-model")


def test_user_price_file(user_home, tmp_path):
    (user_home / "prices.yaml").write_text("gpt-5: {input: 2}\nmy-model: {input: 1, output: 4}\n")
    usage = Usage(input_tokens=10**6, output_tokens=10**6)
    assert cost("openai:gpt-5", usage) == pytest.approx(2 + 10)  # only input overridden
    assert cost("openai:my-model-v2", usage) == pytest.approx(5) and price_known("openai:my-model-v2")
    (user_home / "prices.yaml").unlink()
    other = tmp_path / "p.yaml"
    other.write_text("claude-opus-4: {input: 1, output: 1, cache_read: 0, cache_write: 0}\n")
    assert cost("anthropic:claude-opus-4-1", usage, load_prices(other)) == pytest.approx(2)
    other.write_text("gpt-5: {inptu: 1}\n")
    with pytest.raises(Exception, match="malformed"):
        load_prices(other)


# --- make_model -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gpt-5", "no provider"),
        ("mystery:model", "unknown provider 'mystery'"),
        ("anthropic:", "nothing after"),
        ("openai-compatible:http://localhost:8000/v1", "<url>#<model>"),
    ],
)
def test_make_model_bad_specs(spec, message):
    with pytest.raises(ModelError, match=message) as info:
        make_model(spec)
    assert "openai-compatible:<url>#<model>" in info.value.hint


@pytest.mark.parametrize(
    "spec, variable", [("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-5", "OPENAI_API_KEY")]
)
def test_make_model_missing_key(monkeypatch, spec, variable):
    monkeypatch.delenv(variable)
    with pytest.raises(ModelError, match=variable):
        make_model(spec)


def test_base_url_from_environment(monkeypatch):
    with FakeLLMServer([{"text": "via env"}]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        assert make_model("anthropic:m").complete("", [user("q")], [], 5).message.text() == "via env"
