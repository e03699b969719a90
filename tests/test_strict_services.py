"""Requests a strict service refuses: the loopback servers refuse them as the real services do
(same status, error shape and message; each rule in tests/fake_llm_server.py cites its source),
and kagent's providers never send them."""

from __future__ import annotations

import sys
from pathlib import Path

import anthropic
import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from kagent.agent.loop.models import make_model
from kagent.core.errors import ModelError
from kagent.core.messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, ToolSpec

from fake_llm_server import FakeLLMServer  # noqa: E402

TOOLS = [ToolSpec(name="run", description="Run a command", parameters={"type": "object"})]


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")


def user(text: str) -> Message:
    return Message(role="user", content=[TextBlock(text=text)])


def call(call_id: str) -> dict:
    return {"id": call_id, "name": "run", "arguments": {"cmd": "make"}}


def ran(call_id: str) -> Message:
    return Message(role="user", content=[ToolResult(tool_call_id=call_id, content="ok"), TextBlock(text="[budget]")])


# -- OpenAI: the Responses API, and chat.completions where it refuses ------------------------------
@pytest.mark.parametrize(
    "model, effort, tail",
    [
        ("gpt-5.4", "high", "Please use /v1/responses instead."),
        ("gpt-5.5-mini", "low", "Please use /v1/responses instead."),
        # gpt-5.6 applies a default effort: refused without the parameter too.
        ("gpt-5.6-terra", None, "To use function tools, use /v1/responses or set reasoning_effort to 'none'."),
        ("gpt-6", "xhigh", "To use function tools, use /v1/responses or set reasoning_effort to 'none'."),
    ],
)
def test_chat_completions_refuses_tools_with_effort_and_responses_takes_them(model, effort, tail):
    with FakeLLMServer([{"text": "ok"}]) as server:
        chat = make_model(f"openai-chat:{model}", base_url=server.openai_url, reasoning_effort=effort)
        with pytest.raises(ModelError) as info:
            chat.complete("sys", [user("go")], TOOLS, 1000)
        answer = make_model(f"openai:{model}", base_url=server.openai_url, reasoning_effort=effort).complete(
            "sys", [user("go")], TOOLS, 1000
        )
    expected = f"Function tools with reasoning_effort are not supported for {model} in /v1/chat/completions. {tail}"
    assert info.value.message == f"the OpenAI API rejected the request (400): {expected}"
    assert server.refused == [expected]
    assert answer.message.text() == "ok"
    assert server.requests[1].get("reasoning") == ({"effort": effort} if effort else None)


def test_chat_completions_takes_tools_where_the_effort_is_none():
    with FakeLLMServer([{"text": "ok"}]) as server:
        model = make_model("openai-chat:gpt-5.6", base_url=server.openai_url, reasoning_effort="none")
        assert model.complete("sys", [user("go")], TOOLS, 1000).message.text() == "ok"
    assert server.refused == []


def test_responses_pass_every_reasoning_item_back_exactly():
    turns = [
        {"thinking": "the loads are uncoalesced", "signature": "enc-A", "tool_calls": [call("c1")]},
        {"thinking": "", "signature": "enc-B", "text": "now the tiles", "tool_calls": [call("c2")]},
        {"text": "done"},
    ]
    with FakeLLMServer(turns) as server:
        model = make_model("openai:gpt-5.6", base_url=server.openai_url, reasoning_effort="high")
        conversation = [user("go")]
        for call_id in ("c1", "c2", None):
            response = model.complete("sys", conversation, TOOLS, 1000)
            conversation += [response.message] + ([ran(call_id)] if call_id else [])
    assert server.refused == [] and server.violations == []
    first = conversation[1].content[0]
    assert first == ThinkingBlock(thinking="the loads are uncoalesced", item_id="rs_0", encrypted_content="enc-A")
    third = server.requests[2]["input"]
    reasoning = [i for i in third if i.get("type") == "reasoning"]
    assert reasoning == [
        {
            "type": "reasoning",
            "id": "rs_0",
            "summary": [{"type": "summary_text", "text": "the loads are uncoalesced"}],
            "encrypted_content": "enc-A",
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-B"},
    ]
    # Each reasoning item comes right before the output of the answer it belongs to.
    kinds = [i.get("type", i.get("role")) for i in third]
    assert kinds == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "user",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "user",
    ]


def test_responses_refuse_reasoning_they_cannot_find_or_verify():
    """What kagent must never send: a reasoning item without its encrypted content under
    store: false (a 404), or with content the service did not issue (a 400)."""
    with FakeLLMServer([]) as server:
        client = openai.OpenAI(api_key="k", base_url=server.openai_url, max_retries=0)
        base = {"model": "gpt-5.6", "store": False, "stream": True}
        with pytest.raises(openai.NotFoundError, match="Items are not persisted when `store` is set to false"):
            client.responses.create(**base, input=[{"type": "reasoning", "id": "rs_9", "summary": []}])
        with pytest.raises(openai.BadRequestError, match="could not be verified"):
            client.responses.create(
                **base, input=[{"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "forged"}]
            )
        with pytest.raises(openai.BadRequestError, match="No tool call found for function call output"):
            client.responses.create(**base, input=[{"type": "function_call_output", "call_id": "c9", "output": "x"}])


def test_responses_never_send_another_provider_s_thinking_or_an_empty_answer():
    conversation = [
        user("go"),
        Message(role="assistant", content=[ThinkingBlock(thinking="claude's", signature="sig")]),
        user("   "),
        Message(role="assistant", content=[ThinkingBlock(thinking="cut before its end"), TextBlock(text="\n")]),
        user("go on"),
    ]
    with FakeLLMServer([{"text": "ok"}]) as server:
        make_model("openai:gpt-5.6", base_url=server.openai_url).complete("sys", conversation, TOOLS, 1000)
    assert server.refused == []
    assert server.requests[0]["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "go on"}]},
    ]


def test_chat_completions_never_send_an_assistant_message_without_content():
    conversation = [user("go"), Message(role="assistant", content=[ThinkingBlock(thinking="cut")]), user("go on")]
    with FakeLLMServer([{"text": "ok"}]) as server:
        make_model("openai-chat:gpt-5.2", base_url=server.openai_url).complete("sys", conversation, [], 100)
        client = openai.OpenAI(api_key="k", base_url=server.openai_url, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="expected a string, got null"):
            client.chat.completions.create(
                model="gpt-5.2", messages=[{"role": "user", "content": "go"}, {"role": "assistant", "content": None}]
            )
    assert [m["role"] for m in server.requests[0]["messages"]] == ["system", "user", "user"]


# -- Anthropic ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content, message",
    [
        ([], "messages.1: all messages must have non-empty content except for the optional final assistant message"),
        ([{"type": "text", "text": ""}], "messages: text content blocks must be non-empty"),
        ([{"type": "text", "text": " \n"}], "messages: text content blocks must contain non-whitespace text"),
    ],
)
def test_anthropic_refuses_empty_messages_and_blank_text(content, message):
    with FakeLLMServer([]) as server:
        client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        messages = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "on"},
        ]
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model="claude-opus-4-6", max_tokens=10, messages=messages)
    assert info.value.status_code == 400
    assert info.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def test_anthropic_never_sends_blank_text_or_an_answer_cut_inside_its_thinking():
    conversation = [
        user("go"),
        # The cap cut this answer inside its thinking: the block never got its signature.
        Message(role="assistant", content=[ThinkingBlock(thinking="half a thought")]),
        Message(role="user", content=[TextBlock(text="  "), TextBlock(text="[budget] go on")]),
        Message(role="assistant", content=[TextBlock(text="\n\n"), ToolCall(id="c1", name="run")]),
        ran("c1"),
    ]
    with FakeLLMServer([{"text": "ok"}]) as server:
        model = make_model("anthropic:claude-opus-4-6", base_url=server.url, reasoning_effort="high")
        model.complete("sys", conversation, TOOLS, 1000)
    assert server.refused == [] and server.violations == []
    sent = server.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[0]["content"]] == ["text", "text"]
    assert [b["type"] for b in sent[1]["content"]] == ["tool_use"]


def test_anthropic_thinking_goes_back_exactly_or_is_refused():
    turns = [{"thinking": "tile by 128", "signature": "sig-A", "tool_calls": [call("c1")]}, {"text": "ok"}, {}]
    with FakeLLMServer(turns) as server:
        model = make_model("anthropic:claude-sonnet-4-5", base_url=server.url, thinking_budget=4000)
        first = model.complete("sys", [user("go")], TOOLS, 16_000)
        model.complete("sys", [user("go"), first.message, ran("c1")], TOOLS, 16_000)
        edited = first.message.model_copy(
            update={"content": [ThinkingBlock(thinking="tile by 64", signature="sig-A"), *first.message.content[1:]]}
        )
        with pytest.raises(ModelError, match=r"Invalid `signature` in `thinking` block"):
            model.complete("sys", [user("go"), edited, ran("c1")], TOOLS, 16_000)
    assert server.refused == ["messages.1.content.0: Invalid `signature` in `thinking` block"]


@pytest.mark.parametrize(
    "spec, kwargs, beta",
    [
        ("anthropic:claude-sonnet-4-5", {"thinking_budget": 4000}, "interleaved-thinking-2025-05-14"),
        ("anthropic:claude-opus-4-6", {"reasoning_effort": "high"}, None),  # adaptive: interleaves by itself
        ("anthropic:claude-sonnet-4-5", {}, None),  # no thinking, nothing to interleave
    ],
)
def test_budget_thinking_asks_for_interleaved_thinking(spec, kwargs, beta):
    with FakeLLMServer([{"text": "ok"}]) as server:
        make_model(spec, base_url=server.url, **kwargs).complete("sys", [user("go")], TOOLS, 16_000)
    assert server.headers[0].get("anthropic-beta") == beta


@pytest.mark.slow
def test_a_model_the_service_does_not_know_ends_the_run_at_its_first_request(tmp_path):
    from kagent.agent.lifecycle.runs import start_run
    from kagent.agent.settings import Budget, RunSettings

    from fake_llm_server import UNKNOWN_MODEL

    with FakeLLMServer([{"text": "never"}]) as server:
        spec = f"anthropic:{UNKNOWN_MODEL}"
        options = RunSettings(
            task="02_kimi_linear_decode",
            model=spec,
            budget=Budget(wall_s=600),
            device="cpu",
            scale="smoke",
            runs_root=tmp_path / "runs",
        )
        _, report = start_run(options, model=make_model(spec, base_url=server.url))
    assert len(server.requests) == 1  # a 404 is not retried
    assert report.status == "failed" and report.turns <= 1
    assert report.reason == f"unknown model '{UNKNOWN_MODEL}' at the Anthropic API (404): model: {UNKNOWN_MODEL}"


@pytest.mark.parametrize("model, asked", [("gpt-5.6-sol", True), ("gpt-4.1", False), ("gpt-next", True)])
def test_responses_ask_for_reasoning_items_unless_the_model_is_known_not_to_reason(model, asked):
    with FakeLLMServer([{"text": "ok"}]) as server:
        make_model(f"openai:{model}", base_url=server.openai_url).complete("sys", [user("go")], TOOLS, 100)
    assert ("include" in server.requests[0]) is asked
