"""The megakernel playbook: what the model sees of it, and that the task section's figures
derive from the task's own byte counts (lab/tests/test_notebook_figures.py checks the measured
ones against the lab notebook)."""

from __future__ import annotations

from pathlib import Path

import torch

from kagent import prompts
from kagent.sandbox.harness.decode_task import Task
from kagent.tasks import resolve_task

REPO = Path(__file__).resolve().parents[1]


def test_the_flagship_gets_the_playbook_and_its_own_section(tmp_path):
    kimi = resolve_task("02_kimi_linear_decode")
    system = prompts.system_prompt(kimi)
    assert system.startswith(prompts.load("system.md").strip())
    assert prompts.load("playbook.md").strip() in system
    assert (REPO / "prompts" / "tasks" / "02_kimi_linear_decode.md").read_text().strip() in system
    # A task that does not ask for a single launch gets the general prompt alone.
    (tmp_path / "double.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a):\n"
        "        return a * 2\ndef get_inputs():\n    return [torch.randn(8)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert prompts.system_prompt(resolve_task(str(tmp_path / "double.py"))) == prompts.load("system.md").strip() + "\n"


def test_the_task_sections_figures_follow_from_its_bytes_and_our_measurements():
    text = " ".join((REPO / "prompts" / "tasks" / "02_kimi_linear_decode.md").read_text().split())
    task = Task(REPO / "tasks" / "02_kimi_linear_decode", "full", torch.device("cpu"))
    parts = {ctx: task.roofline.bytes_by_part(task.cfg, ctx) for ctx in (2048, 8192, 16384)}
    at_2k = parts[2048]

    def mb(n: float) -> str:
        return f"{n / 1e6:.1f} MB"

    for name in (
        "L0.attn.q_proj",
        "L0.attn.state",
        "L0.attn.conv",
        "L0.attn.beta_proj",
        "L3.attn.q_proj",
        "L3.attn.kv_a",
        "L3.attn.kv_b",
        "L3.attn.o_proj",
        "L0.moe.router",
        "L0.moe.experts",
    ):
        assert mb(at_2k[name]).removesuffix(" MB") in text, name
    caches = " / ".join(mb(parts[ctx]["L3.attn.cache"]).removesuffix(" MB") for ctx in (2048, 8192, 16384))
    assert f"the cache {caches}" in text
    experts = sum(v for k, v in at_2k.items() if k.endswith("moe.experts"))
    assert f"{experts / 1e6:.0f} MB of {sum(at_2k.values()) / 1e6:.0f} MB at 2K" in text
    # One floor, the run's device's, in the first message: the section states none of its own.
    assert "The whole step's floor on this run's device is in the first message" in text
    assert "60 / 62 / 64" not in text and "4044 GB/s" not in text
    # The copy bandwidth and the barriers' costs are measured (lab/tests/test_notebook_figures.py).
    # 24 barriers at grid.sync's 0.97 µs, 32 at the Triton barrier's 1.40 µs.
    assert f"{24 * 0.97:.0f}-{32 * 1.40:.0f} µs at 0.97-1.40 µs each" in text
