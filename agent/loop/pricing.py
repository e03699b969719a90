"""What a run costs: USD per million tokens by model, matched on the longest name prefix.

The built-in table holds the list prices of hosted Anthropic and OpenAI models (5-minute
cache writes for Anthropic; OpenAI does not charge for writing its cache). A provider that is
not hosted (kagent.core.providers: a local server, a scripted session) is free. A user file,
``$KAGENT_HOME/prices.yaml`` or a path given to :func:`load_prices`, adds or overrides entries::

    claude-opus-5: {input: 5, output: 25, cache_read: 0.5, cache_write: 6.25}
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Optional, Union

import yaml

from kagent.core.errors import KagentError
from kagent.core.messages import Usage
from kagent.core.paths import kagent_home
from kagent.core.providers import provider_of


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


# Sources, read 2026-12-07: Anthropic's model pages (platform.claude.com/docs/en/models/<model>/
# overview, "Pricing": input, output, 5-minute cache write, cache read); where a page gives no
# cache rates, Anthropic's usual 1.25x (write) and 0.1x (read) of input. OpenAI's pricing page
# as quoted by morphllm.com/openai-api-pricing (2026-06) for 5.4/5.5, OpenAI's GPT-5.6 preview
# (laxima.tech, finout.io: Sol, Terra, Luna; cache reads at 0.1x) and BerriAI/litellm#39633
# (GPT-6 Astra). Prices that rise past 272K input tokens (GPT-5.6, GPT-6) are the base rate here.
BUILTIN_PRICES: dict[str, Price] = {
    # Anthropic
    "claude-opus-4": Price(15.0, 75.0, 1.50, 18.75),  # 4 and 4.1
    "claude-opus-4-5": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-6": Price(5.0, 25.0, 0.50, 6.25),  # models/opus-4-6
    "claude-opus-4-7": Price(5.0, 25.0, 0.50, 6.25),  # models overview
    "claude-opus-4-8": Price(5.0, 25.0, 0.50, 6.25),  # benchr.org/pricing/gpt-5-6 quotes it at $5/$25
    "claude-opus-5": Price(5.0, 25.0, 0.50, 6.25),  # models/opus-5
    "claude-opus-5-5": Price(4.0, 20.0, 0.20, 5.0),  # models/opus-5-5
    "claude-sonnet-4": Price(3.0, 15.0, 0.30, 3.75),  # 4, 4.5 and 4.6 (models/sonnet-4-6)
    "claude-sonnet-5": Price(2.0, 10.0, 0.20, 2.50),  # 5 and 5.5 (models/sonnet-5)
    "claude-fable-5": Price(10.0, 50.0, 1.0, 12.50),  # Fable 5 and 5.1 (models/opus-5-5 lineup)
    "claude-fable-5-2": Price(8.0, 40.0, 0.80, 10.0),  # models/sonnet-5 lineup
    "claude-haiku-5": Price(0.10, 0.50, 0.01, 0.125),  # Haiku 5.5, "from" its lowest rate
    "claude-3-7-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4": Price(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
    # OpenAI
    "gpt-5": Price(1.25, 10.0, 0.125),  # also gpt-5.1
    "gpt-5-mini": Price(0.25, 2.0, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-5-pro": Price(15.0, 120.0),
    "gpt-5.4": Price(2.50, 15.0, 0.25),
    "gpt-5.4-mini": Price(0.75, 4.50, 0.075),
    "gpt-5.4-nano": Price(0.20, 1.25, 0.02),
    "gpt-5.4-pro": Price(30.0, 180.0),
    "gpt-5.5": Price(5.0, 30.0, 0.50),
    "gpt-5.5-pro": Price(30.0, 180.0),
    "gpt-5.6": Price(5.0, 30.0, 0.50),  # the alias is Sol
    "gpt-5.6-terra": Price(2.50, 15.0, 0.25),
    "gpt-5.6-luna": Price(1.0, 6.0, 0.10),
    "gpt-6": Price(10.0, 50.0, 1.0),  # GPT-6 Astra
    "gpt-6.1-sol": Price(2.0, 10.0, 0.10),  # premk134/codex-token-watch v0.3.3
    "gpt-4.1": Price(2.0, 8.0, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.0, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "o3": Price(2.0, 8.0, 0.50),
    "o3-pro": Price(20.0, 80.0),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
}

_FIELDS = {f.name for f in fields(Price)}


def _user_file(path: Path) -> dict[str, dict[str, float]]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KagentError(f"cannot read the price file {path}: {exc}") from exc
    data = data or {}
    ok = isinstance(data, dict) and all(
        isinstance(entry, dict)
        and set(entry) <= _FIELDS
        and all(isinstance(v, (int, float)) and v >= 0 for v in entry.values())
        for entry in data.values()
    )
    if not ok:
        raise KagentError(
            f"the price file {path} is malformed",
            hint="expected {model_prefix: {input: x, output: y, cache_read: z, "
            "cache_write: w}}, in USD per million tokens",
        )
    return {str(prefix): entry for prefix, entry in data.items()}


def load_prices(path: Optional[Union[str, Path]] = None) -> dict[str, Price]:
    """The built-in table with a user file applied (``$KAGENT_HOME/prices.yaml`` by default).

    An entry for a known prefix changes only the fields it gives; a new prefix's missing
    fields are 0.
    """
    prices = dict(BUILTIN_PRICES)
    file = Path(path) if path is not None else kagent_home() / "prices.yaml"
    if path is None and not file.exists():
        return prices
    for prefix, entry in _user_file(file).items():
        base = prices.get(prefix, Price(0.0, 0.0))
        prices[prefix] = replace(base, **{k: float(v) for k, v in entry.items()})
    return prices


def _model_of(spec_or_model: str) -> Optional[str]:
    """The hosted model name of a spec or bare name; None for a free provider."""
    _, sep, rest = spec_or_model.partition(":")
    if not sep:
        return spec_or_model
    provider = provider_of(spec_or_model)
    return None if provider is not None and not provider.hosted else rest


def price_of(spec_or_model: str, prices: Optional[dict[str, Price]] = None) -> Optional[Price]:
    """The price for a model (longest matching prefix); None when free or unknown."""
    model = _model_of(spec_or_model)
    if model is None:
        return None
    prices = load_prices() if prices is None else prices
    matches = [prefix for prefix in prices if model.startswith(prefix)]
    return prices[max(matches, key=len)] if matches else None


def price_known(spec_or_model: str, prices: Optional[dict[str, Price]] = None) -> bool:
    """Whether ``cost`` is real: true for free models and priced hosted models, false when a
    hosted model is missing from the table (its cost then reads 0)."""
    return _model_of(spec_or_model) is None or price_of(spec_or_model, prices) is not None


def price_warning(spec_or_model: str, prices: Optional[dict[str, Price]] = None) -> Optional[str]:
    """What to tell the user of a hosted model missing from the price table, whose cost then
    reads $0 however much it spends (so --max-cost cannot stop it); None when its price is known."""
    if price_known(spec_or_model, prices):
        return None
    return (
        f"{spec_or_model} has no price in kagent's table: its tokens are counted, but its cost reads $0 and "
        f"--max-cost cannot stop the run (give its price in {kagent_home() / 'prices.yaml'})"
    )


def cost(spec_or_model: str, usage: Usage, prices: Optional[dict[str, Price]] = None) -> float:
    """USD for ``usage``. Reasoning tokens are already inside ``output_tokens``: not added again."""
    price = price_of(spec_or_model, prices)
    if price is None:
        return 0.0
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / 1e6
