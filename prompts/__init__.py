"""Prompt texts for the agent, kept as files beside this module."""
from __future__ import annotations

from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent


def load(name: str) -> str:
    """The prompt file ``name`` (e.g. "system.md")."""
    return (PROMPTS_DIR / name).read_text()
