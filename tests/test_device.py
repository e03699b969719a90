"""Resolving --device: no torch for "cpu", and what torch saw of CUDA kept under kagent's home
for as long as the machine's fingerprint holds, so that a warm `kagent eval` does not import
torch (2-4 s) before its evaluation starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kagent.agent.lifecycle.device import PROBE_FILE, DeviceProbe, machine_fingerprint, probe, resolve_device
from kagent.core.errors import KagentError

RESOLVE = (
    "import sys, json; from kagent.agent.lifecycle.device import resolve_device; "
    "print(json.dumps([resolve_device(sys.argv[1]), 'torch' in sys.modules]))"
)


def _resolve_in_a_fresh_process(device: str, home: Path, **env: str) -> tuple[str, bool]:
    """(the device resolved, whether torch was imported) in a new interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", RESOLVE, device],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "KAGENT_HOME": str(home), **env},
        timeout=300,
    )
    resolved, imported = json.loads(out.stdout)
    return resolved, imported


def test_cpu_needs_no_torch(tmp_path):
    assert _resolve_in_a_fresh_process("cpu", tmp_path) == ("cpu", False)
    assert not (tmp_path / PROBE_FILE).exists()


def test_what_torch_saw_is_kept_until_the_fingerprint_changes(tmp_path):
    first = _resolve_in_a_fresh_process("auto", tmp_path)
    assert first[1]  # asked torch
    kept = DeviceProbe.model_validate_json((tmp_path / PROBE_FILE).read_text())
    assert kept.fingerprint == machine_fingerprint()
    assert _resolve_in_a_fresh_process("auto", tmp_path) == (first[0], False)
    # Devices hidden or shown: torch is asked again.
    assert _resolve_in_a_fresh_process("auto", tmp_path, CUDA_VISIBLE_DEVICES="")[1]


def _keep(home: Path, **seen) -> None:
    fingerprint = machine_fingerprint()
    assert fingerprint is not None
    (home / PROBE_FILE).write_text(DeviceProbe(fingerprint=fingerprint, torch_version="2.x", **seen).model_dump_json())


def test_a_kept_probe_answers_every_device_name(monkeypatch, tmp_path):
    monkeypatch.setenv("KAGENT_HOME", str(tmp_path))
    _keep(tmp_path, cuda_available=True, device_count=2)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(KagentError, match=r"sees 2 CUDA device\(s\)"):
        resolve_device("cuda:2")
    _keep(tmp_path, cuda_available=False, device_count=0)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(KagentError, match="torch 2.x sees no CUDA device"):
        resolve_device("cuda")


@pytest.mark.parametrize(
    "kept",
    [
        "not json",
        '{"version": 99}',
        json.dumps({"fingerprint": "elsewhere", "torch_version": "0", "cuda_available": True, "device_count": 8}),
    ],
)
def test_a_probe_kept_for_another_machine_or_unreadable_is_asked_again(tmp_path, kept):
    import torch

    (tmp_path / PROBE_FILE).write_text(kept)
    seen = probe(tmp_path)
    assert (seen.torch_version, seen.cuda_available) == (torch.__version__, torch.cuda.is_available())
    assert DeviceProbe.model_validate_json((tmp_path / PROBE_FILE).read_text()) == seen
