"""A provider is one entry of kagent.core.providers: these tests hold what is made from the
entries (make_model's choice of factory, the help, docs/models.md's table, the variables the
sandbox hides, the limits and prices) to the entries, and show that a provider added there,
with its factory, is taken up everywhere without another file changing."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kagent.agent.cli.app import app
from kagent.agent.loop.models import make_model
from kagent.agent.loop.models.limits import DEFAULT_LIMITS, limits_of, limits_warning, output_settings
from kagent.agent.loop.models.scripted import ScriptedModel
from kagent.agent.loop.models.spec import ModelChoice
from kagent.agent.loop.pricing import Price, price_known
from kagent.core.errors import ModelError
from kagent.core.providers import PROVIDERS, Provider, model_help, spec_forms
from kagent.sandbox.scrub import is_secret_name, scrubbed_env

DOCS = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def providers_table() -> str:
    rows = [f"| {p.label} | `{p.example}` | {p.key_text()} |" for p in PROVIDERS.values()]
    return "\n".join(["| provider | `--model` | key |", "|---|---|---|", *rows])


def test_the_docs_table_of_providers_is_the_registry():
    assert providers_table() in DOCS.read_text(), f"docs/models.md's table should read:\n{providers_table()}"


@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=lambda p: p.name)
def test_each_entry_names_a_factory_that_exists_and_forms_of_its_own(provider: Provider):
    module, _, function = provider.factory.partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert all(form.startswith(provider.name + ":") for form in provider.forms)
    assert provider.forms[0] in model_help() and provider.forms[0] in spec_forms()


def test_the_run_commands_help_lists_every_provider():
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for provider in PROVIDERS.values():
        assert provider.forms[0] in result.output


def test_the_sandbox_hides_every_providers_variables():
    variables = {f"{p.variables_prefix}ORG_ID" for p in PROVIDERS.values() if p.variables_prefix}
    assert variables >= {"ANTHROPIC_ORG_ID", "OPENAI_ORG_ID"}
    assert scrubbed_env({**dict.fromkeys(variables, "x"), "PATH": "/bin"}) == {"PATH": "/bin"}


def replayed_from_choice(choice: ModelChoice) -> ScriptedModel:
    """A factory for the provider the next test adds: it reads its key, as a hosted one does."""
    choice.api_key()
    return ScriptedModel([], name=choice.spec)


@pytest.fixture
def acme(monkeypatch: pytest.MonkeyPatch) -> Provider:
    """A new hosted provider, as one entry: its factory, key, thinking form."""
    entry = Provider(
        "acme",
        f"{__name__}:replayed_from_choice",
        "pytest",
        "Acme",
        ("acme:<model>",),
        "Acme's API",
        "acme:rocket-1",
        key_variable="ACME_API_KEY",
        base_url_variable="ACME_BASE_URL",
        unknown_thinking=("budget", "adaptive"),
    )
    monkeypatch.setitem(PROVIDERS, "acme", entry)
    return entry


def test_a_provider_added_to_the_registry_is_taken_up_everywhere(acme: Provider, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ModelError, match="no API key: set ACME_API_KEY"):
        make_model("acme:rocket-1")
    monkeypatch.setenv("ACME_API_KEY", "k")
    assert make_model("acme:rocket-1").name == "acme:rocket-1"
    assert is_secret_name("ACME_BASE_URL") and "acme:<model>" in model_help()
    # Hosted: kagent's tables speak for it, so a model missing from them is warned of and not free.
    assert limits_of("acme:rocket-1") == DEFAULT_LIMITS and limits_warning("acme:rocket-1") is not None
    assert not price_known("acme:rocket-1", {"claude-opus-5": Price(5.0, 25.0)})
    assert output_settings("acme:rocket-1", thinking=2048).thinking_budget == 2048
    assert output_settings("acme:rocket-1", effort="low").reasoning_effort == "low"


def test_a_provider_that_is_not_hosted_is_free_and_keyless(acme: Provider, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(
        PROVIDERS, "acme", dataclasses.replace(acme, hosted=False, key_required=False, url_in_spec=True)
    )
    monkeypatch.delenv("ACME_API_KEY", raising=False)
    assert make_model("acme:http://localhost:1/v1#rocket-1").name == "acme:http://localhost:1/v1#rocket-1"
    assert price_known("acme:rocket-1", {}) and limits_warning("acme:rocket-1") is None


def test_an_unknown_provider_is_refused_with_every_form():
    with pytest.raises(ModelError, match="unknown provider 'acme'") as caught:
        make_model("acme:rocket-1")
    assert all(form in (caught.value.hint or "") for form in spec_forms())
