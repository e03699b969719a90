"""Long sessions through each provider against strict loopback services with a 200K window: the
conversation grows past the window, kagent compacts before prompt + max_tokens would pass it
(from the service's own counts), and no request is refused. The Responses session keeps its
reasoning items across turns and across `kagent resume`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_long_runs  # noqa: E402

from kagent.agent.lifecycle.runs import resume_run, start_run
from kagent.agent.loop.models import make_model
from kagent.agent.settings import Budget, RunSettings
from kagent.agent.storage.trace import read_trace

from fake_llm_server import FakeLLMServer, prompt_tokens  # noqa: E402

# The benchmark and the final re-verification are made up (test_long_runs), and the session
# measures no baseline: what is under test is the conversation's size, and each evaluation
# would take seconds.
made_up = test_long_runs.made_up

WINDOW = 200_000
BIG = 45_000  # characters of each long answer: 20 of them are 300K tokens to the service


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def session(reference: str, thinking: bool) -> list[dict]:
    """Look around, write and benchmark a solution, think at length 20 times, then finish."""
    turns = [
        {"tool_calls": [call("list_files")]},
        {"tool_calls": [call("write_file", path="solution.py", content=reference)]},
        {"tool_calls": [call("benchmark")]},
    ]
    for i in range(20):
        turn = {"text": f"Notes {i}: " + "tile the loads by 128; " * (BIG // 22), "tool_calls": [call("list_files")]}
        turns.append({**turn, "thinking": f"step {i}: the loads are uncoalesced"} if thinking else turn)
    finish = call("finish", summary="a port of the reference")
    turns += [{"tool_calls": [finish]}, {"tool_calls": [finish]}]  # an early finish is answered once
    for n, turn in enumerate(turns):
        turn["tool_calls"] = [{"id": f"c{n}_{i}", **c} for i, c in enumerate(turn["tool_calls"])]
    return turns


CASES = {
    # spec, max_output_tokens, thinking, the user's models.yaml (a 200K window for a 1M model)
    "anthropic-budget": ("anthropic:claude-opus-4-5", 64_000, {"thinking_budget": 16_000}, ""),
    "anthropic-adaptive": (
        "anthropic:claude-opus-4-6",
        64_000,
        {"reasoning_effort": "high"},
        "claude-opus-4-6: {context_window: 200000}",
    ),
    "openai-responses": (
        "openai:gpt-5.6-terra",
        64_000,
        {"reasoning_effort": "high"},
        "gpt-5.6: {context_window: 200000}",
    ),
    "openai-compatible": ("openai-compatible:{url}#qwen3-coder", 16_000, {}, ""),
}


def _run(tmp_path, user_home, kimi, monkeypatch, case: str, extra_turns: int = 0):
    spec, cap, thinking, user_limits = CASES[case]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    (user_home / "models.yaml").write_text(user_limits + "\n")
    turns = session((kimi.path / "reference.py").read_text(), thinking=bool(thinking))
    server = FakeLLMServer(turns + turns[-extra_turns:] if extra_turns else turns, context_window=WINDOW)
    server.__enter__()
    url = server.url if spec.startswith("anthropic") else server.openai_url
    spec = spec.format(url=url)
    options = RunSettings(
        task="02_kimi_linear_decode",
        model=spec,
        budget=Budget(wall_s=1800),
        device="cpu",
        scale="smoke",
        runs_root=tmp_path / "runs",
        max_output_tokens=cap,
        **thinking,
    )
    model = make_model(spec, base_url=url, **thinking)
    run_dir, report = start_run(options, model=model)
    return server, model, run_dir, report


def _largest_request(server: FakeLLMServer) -> int:
    return max(prompt_tokens(b) + (b.get("max_tokens") or b.get("max_output_tokens") or 0) for b in server.requests)


def _assert_past_the_window_with_no_request_refused(server: FakeLLMServer, run_dir: Path, report) -> None:
    assert server.refused == [] and server.violations == []
    assert report.status == "finished", report.reason
    events = read_trace(run_dir / "trace.jsonl").events
    assert sum(e.type == "compacted" for e in events) >= 1
    sent = sum(len(json.dumps(t)) for t in server.turns) // 3
    assert sent > WINDOW  # the conversation as a whole would not have fit
    assert _largest_request(server) <= WINDOW


# The Responses case is the test after this one: its session, resumed once it has ended.
@pytest.mark.slow
@pytest.mark.usefixtures("made_up")
@pytest.mark.parametrize("case", sorted(set(CASES) - {"openai-responses"}))
def test_a_session_past_a_200k_window_ends_finished_with_no_request_refused(
    case, tmp_path, user_home, kimi, monkeypatch
):
    server, _, run_dir, report = _run(tmp_path, user_home, kimi, monkeypatch, case)
    server.__exit__(None, None, None)
    _assert_past_the_window_with_no_request_refused(server, run_dir, report)


@pytest.mark.slow
@pytest.mark.usefixtures("made_up")
def test_the_responses_session_keeps_its_reasoning_across_turns_and_resume(tmp_path, user_home, kimi, monkeypatch):
    server, model, run_dir, report = _run(tmp_path, user_home, kimi, monkeypatch, "openai-responses", extra_turns=1)
    try:
        _assert_past_the_window_with_no_request_refused(server, run_dir, report)
        before = len(server.requests)
        # Each request passes back every reasoning item of the answers it still holds.
        for body in server.requests[4:]:  # the first answer that thinks is the fourth
            held = {i["id"] for i in body["input"] if i.get("type") == "reasoning"}
            assert held and all(server.issued[i] for i in held)
        resumed_dir, resumed = resume_run(run_dir.name, extra_budget_s=600, root=tmp_path / "runs", model=model)
        assert resumed_dir == run_dir and resumed.status == "finished", resumed.reason
        after = server.requests[before]
        last = server.requests[before - 1]
        kept = [i for i in last["input"] if i.get("type") == "reasoning"]
        assert kept and all(i in after["input"] for i in kept)  # exactly as they were, encrypted content and all
    finally:
        server.__exit__(None, None, None)
    assert server.refused == [] and server.violations == []
