"""One settings model for a run: its defaults, then a --config file, then the flags, and what a
started run keeps of it (config.json and the trace hold the same typed record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kagent.agent.cli.config import known_names, load_settings
from kagent.agent.loop.models.limits import limits_of
from kagent.agent.settings import Budget, RunConfig, RunSettings
from kagent.core.errors import KagentError

REPO = Path(__file__).resolve().parents[1]
NO_FLAGS = {
    "model": None,
    "budget": None,
    "max_cost": None,
    "max_tokens": None,
    "device": None,
    "scale": None,
    "thinking": None,
    "reasoning_effort": None,
    "max_output_tokens": None,
    "revert": None,
}
SONNET = "anthropic:claude-sonnet-4-5"  # a model that takes a thinking budget


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kagent.yaml"
    path.write_text(text)
    return path


def test_defaults_then_the_file_then_the_flags(tmp_path):
    path = config_file(
        tmp_path, f"model: {SONNET}\nbudget: 20m\nmax_cost: 5\ndevice: cpu\nthinking: 1024\nkeep_recent_messages: 6\n"
    )
    settings = load_settings("02_kimi_linear_decode", path, {**NO_FLAGS, "budget": "1h", "revert": False})
    assert settings.model == SONNET and settings.device == "cpu"
    # The flag's wall time over the file's; the file's cost cap kept beside it.
    assert settings.budget == Budget(wall_s=3600, max_cost_usd=5)
    assert settings.thinking_budget == 1024 and settings.keep_recent_messages == 6 and not settings.auto_revert
    # Not given: the model's own output cap, and (for a model that thinks) its thinking on.
    assert settings.max_output_tokens == limits_of(SONNET).max_output_tokens
    default = load_settings("t", None, {**NO_FLAGS, "model": SONNET})
    assert default.budget.wall_s == 3 * 3600 and default.thinking_budget == default.max_output_tokens // 2
    effort = load_settings("t", None, {**NO_FLAGS, "model": "openai:gpt-5", "reasoning_effort": "low"})
    assert effort.reasoning_effort == "low" and effort.thinking_budget is None
    assert load_settings("t", None, {**NO_FLAGS, "model": SONNET, "thinking": "off"}).thinking_budget is None


def test_every_setting_can_be_given_in_a_file_by_its_own_name(tmp_path):
    path = config_file(
        tmp_path,
        f"model: {SONNET}\nbudget: {{wall_s: 2h, max_tokens: 1000, final_slice: 0.2}}\n"
        "scale: smoke\nauto_revert: false\nthinking_budget: 2048\nmax_output_tokens: 4000\n"
        "context_limit_tokens: 9000\nkeep_recent_messages: 3\neval_timeout_s: 60\neval_rounds: 2\n"
        "eval_min_request_ms: 0\n"
        "model_timeout_s: 30\nmax_repeated_failures: 3\nmax_text_answers: 2\ntool_output_chars: 12000\n"
        "solution_name: kernel.py\n"
        f"runs_root: {tmp_path / 'runs'}\nrun_id: my-run\ndirection: split-K first\n",
    )
    settings = load_settings("t", path, NO_FLAGS)
    given = settings.model_dump() | {"runs_root": settings.runs_root}
    defaults = RunSettings(task="t", model="m").model_dump() | {"runs_root": None}
    changed = {name for name in given if given[name] != defaults[name]}
    # (a model takes a thinking budget or an effort, not both: the effort is shown above)
    assert changed == set(RunSettings.model_fields) - {"task", "device", "reasoning_effort"}
    assert settings.budget == Budget(wall_s=7200, max_tokens=1000, final_slice=0.2)


@pytest.mark.parametrize(
    "text, flags, message",
    [
        ("model: scripted:a.yaml\nsurprise: 1\n", {}, "unknown settings ['surprise']"),
        ("model: scripted:a.yaml\nthinking: 1\nthinking_budget: 2\n", {}, "thinking and thinking_budget are the same"),
        (
            "model: scripted:a.yaml\nmax_cost: -1\n",
            {},
            "kagent.yaml: budget.max_cost_usd: input should be greater than 0",
        ),
        ("model: scripted:a.yaml\n", {"max_cost": 0}, "--max-cost: input should be greater than 0"),
        ("model: scripted:a.yaml\nbudget: soon\n", {}, "--budget takes a duration"),
        ("model: scripted:a.yaml\neval_rounds: 0\n", {}, "kagent.yaml: eval_rounds: input should be greater than"),
        ("model: scripted:a.yaml\neval_min_request_ms: fast\n", {}, "eval_min_request_ms: input should be a valid"),
        ("[1, 2]\n", {}, "a config file holds settings by name"),
        ("budget: 1h\n", {}, "give --model"),
    ],
)
def test_a_mistake_is_one_line_naming_who_made_it(tmp_path, text, flags, message):
    with pytest.raises(KagentError) as caught:
        load_settings("t", config_file(tmp_path, text), {**NO_FLAGS, **flags})
    assert message in caught.value.message


def test_a_run_keeps_its_settings_made_concrete():
    settings = RunSettings(task="t", model="m", device="auto", runs_root=Path("/elsewhere"))
    config = settings.for_run("t-1", device="cuda:1")
    assert config.device == "cuda:1" and config.scale == "full" and config.run_id == "t-1"
    assert "runs_root" not in config.model_dump()  # where the run folder went is not a setting it keeps
    assert RunConfig.model_validate_json(config.model_dump_json()) == config
    assert config.settings() == settings.model_copy(update={"device": "cuda:1", "scale": "full", "runs_root": None})
    assert RunSettings(task="t", model="m").for_run("t-2", device="cpu").scale == "smoke"


def settings_table() -> str:
    """docs/settings.md's table of settings, as the models say them."""

    def shown(value: object) -> str:
        return (
            "none"
            if value is None
            else str(value).lower()
            if isinstance(value, bool)
            else f"{value:g}"
            if isinstance(value, float)
            else str(value)
        )

    rows = ["| setting | default | what it is |", "|---|---|---|"]
    for name, field in RunSettings.model_fields.items():
        if name == "budget":
            rows += [
                f"| `budget.{part}` | {shown(inner.default)} | {inner.description} |"
                for part, inner in Budget.model_fields.items()
            ]
        elif name != "task":
            rows.append(
                f"| `{name}` | {'required' if field.is_required() else shown(field.default)} | {field.description} |"
            )
    return "\n".join(rows)


def test_every_setting_says_what_it_is_and_the_docs_list_them_as_the_code_does():
    for model in (RunSettings, Budget):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
    table = settings_table()
    page = REPO / "docs" / "settings.md"
    assert table in page.read_text(), f"docs/settings.md's table of settings should read:\n{table}"
    assert "runs_root" in known_names() and "task" not in known_names()
