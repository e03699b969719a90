"""The lab's tests, like the product's, keep kagent's home and runs in their own temporary
folders, so that no test reads or writes a user's: each test module imports this autouse
fixture. (Not a conftest.py: the product's tests import their helpers `from conftest`, and a
second module of that name would stand in for theirs.)"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGENT_HOME", str(tmp_path / "kagent-home"))
    monkeypatch.setenv("KAGENT_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("KAGENT_DEBUG", raising=False)
