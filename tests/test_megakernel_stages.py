"""kagent's megakernel (examples/02_kimi_linear_decode/) follows the stage instruments'
convention of the `stages` tool: its declared stages move exactly the task's bytes floor,
`kagent_stop_after` skips the work after a stage, and the stamps are filled. On the CPU
(Triton's interpreter, smoke scale), where the kernel is launched once per stage.

The kernel runs in a fresh interpreter: its module must set TRITON_INTERPRET before Triton is
imported, and another test module of this session may have imported Triton already."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kagent.sandbox.instruments.stages import resolve_bytes, stamp_times

pytestmark = [
    pytest.mark.example_kernel,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed"),
]

REPO = Path(__file__).resolve().parents[1]


def driver_env(*dropped: str, **added: str) -> dict[str, str]:
    """A driver's environment: this one without TRITON_INTERPRET (the kernel's module sets it)
    and ``dropped``, with ``added``, and torch and numpy on one thread, as an evaluation's
    processes compute on the CPU (with a second thread waiting for a core on a loaded 2-core
    machine, the stages' driver took 5.0 s of CPU, and 3.1 s on one, 2026-12-07)."""
    kept = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and k not in dropped}
    return {**kept, "OMP_NUM_THREADS": "1", **added}


# One model at smoke scale; steps with the knob at -1 (no stage's work), 1 (L0's KDA_IN and
# KDA_REC) and 2; what each left of the KDA states, the stamps, the declared stages and the
# task's floor parts.
DRIVER = """
import json, sys
import torch
sys.path[:0] = ["tasks/02_kimi_linear_decode", "examples/02_kimi_linear_decode"]
import reference as ref, roofline, shapes, solution
shape = shapes.SMOKE_SHAPES[0]
cfg, context_len = ref.build_config(shape), shape["context_len"]
torch.manual_seed(0)
model = solution.Model(cfg)
model.load_state_dict(ref.Model(cfg).state_dict(), strict=True)
kda = [i for i, kind in enumerate(cfg.pattern) if kind == "K"]
steps = {}
for stop in (-1, 1, 2):
    state = ref.init_state(cfg, context_len, 3)
    before = {i: state[i]["S"].clone() for i in kda}
    model.kagent_stamps.zero_()
    model.kagent_stop_after = stop
    model.step(ref.init_token(cfg, 3), state)
    steps[stop] = {"S_changed": [not torch.equal(before[i], state[i]["S"]) for i in kda],
                   "stamps": model.kagent_stamps.tolist()}
print(json.dumps({"stages": model.kagent_stages(context_len), "plan": len(model.plan_rows), "steps": steps,
                  "parts": roofline.bytes_by_part(cfg, context_len),
                  "floor": roofline.bytes_per_step(cfg, context_len)}))
"""


@pytest.fixture(scope="module")
def ran() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=REPO, env=driver_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_declared_stages_move_exactly_the_task_s_bytes_floor(ran):
    stages = ran["stages"]
    assert len(stages) == ran["plan"] == 27
    assert stages[0]["name"] == "L0 KDA_IN" and stages[-1]["name"] == "L3 MOE_DOWN"
    moved = resolve_bytes(stages, ran["parts"])
    assert sum(b for b in moved if b) == ran["floor"]
    merge = next(i for i, s in enumerate(stages) if s["name"].endswith("MLA_MERGE"))
    assert moved[merge] is None  # its partials are scratch, not part of the floor


def test_stopping_after_a_stage_skips_the_work_of_the_later_ones(ran):
    assert ran["steps"]["-1"]["S_changed"] == [False, False, False]
    assert ran["steps"]["1"]["S_changed"] == [True, False, False]  # L0's recurrence ran, no other


def test_the_host_stamps_each_stage_s_end_under_the_interpreter(ran):
    stamps = ran["steps"]["2"]["stamps"]
    assert len(stamps) == 28 and all(row[0] > 0 for row in stamps)
    times = stamp_times(stamps)
    assert len(times) == 27 and all(t["us"] >= 0 for t in times)


# Two chained steps with the GPU's tiles and 5 programs (so that every program takes several
# pieces of the split down projection, and the count of each tile is reached by pieces of
# different programs), the kernel with every switch off against its switchable variants (the
# split down projection; the top-k computed once in MOE_IN; the shared expert in pieces;
# the attention in one bf16 part) and against the defaults: hidden and every state tensor.
VARIANTS_DRIVER = """
import json, os, sys
import torch
sys.path[:0] = ["tasks/02_kimi_linear_decode", "examples/02_kimi_linear_decode"]
import reference as ref, shapes, solution
shape = shapes.SMOKE_SHAPES[0]
cfg, context_len = ref.build_config(shape), shape["context_len"]
torch.manual_seed(0)
weights = ref.Model(cfg).state_dict()
variants = json.loads(sys.argv[1])
out, ran = {}, {}
for name, switches in variants.items():
    os.environ.update(switches)
    model = solution.Model(cfg)
    model.load_state_dict(weights, strict=True)
    state, hidden = ref.init_state(cfg, context_len, 5), ref.init_token(cfg, 5)
    for _ in range(2):
        hidden, state = model.step(hidden, state)
    for key in switches:   # (the layout is read from the environment at the first step)
        del os.environ[key]
    out[name] = [hidden] + [t for layer in state for t in layer.values()]
    c = model.layout.consts
    ran[name] = dict(split=c["SPLIT_F"], late_count=c["LATE_COUNT"], lanes=c["QP"], route_once=c["ROUTE_ONCE"],
                     att_lo=c["ATT_LO"], group_sums=c["GROUP_SUMS"],
                     programs=model.layout.programs,
                     pieces=(c["NACT"] + c["NSH"]) * c["HID"] // c["BN_F"], counts=model.pk_count.tolist(),
                     split_sh=c["SPLIT_SH"], groups_a_piece=c["HID"] // 128 // c["SPLIT_SH"],
                     worst_cos=min(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(),
                                                                         dim=0).item()
                                   for a, b in zip(out["none"], out[name], strict=True)),
                     route=model.pk_route.tolist(), nap=c["NAP"], nact=c["NACT"], experts=c["E"],
                     bar_count=c["BAR_COUNT"],
                     bitwise=all(torch.equal(a, b) for a, b in zip(out["none"], out[name], strict=True)))
print(json.dumps(ran))
"""


# Every switch of the layout off (each is on by default but three: ATT_LO's bf16 attention, whose
# "off" is 1, two parts; GROUP_SUMS and LATE_COUNT, not yet shown to gain on a GPU).
SWITCHES_OFF = {
    "KIMI_SPLIT_F": "0",
    "KIMI_ROUTE_ONCE": "0",
    "KIMI_SPLIT_SH": "1",
    "KIMI_BAR_COUNT": "0",
    "KIMI_ATT_LO": "1",
    "KIMI_GROUP_SUMS": "0",
    "KIMI_LATE_COUNT": "0",
}


@pytest.fixture(scope="module")
def variants():
    def on(**switch):
        return {**SWITCHES_OFF, **switch}

    switches = {
        "none": SWITCHES_OFF,
        "split": on(KIMI_SPLIT_F="1"),
        "route_once": on(KIMI_ROUTE_ONCE="1"),
        "split_shared": on(KIMI_SPLIT_SH="2"),
        "late_count": on(KIMI_SPLIT_F="1", KIMI_LATE_COUNT="1"),
        "attention_bf16": on(KIMI_ATT_LO="0"),
        "group_sums": on(KIMI_GROUP_SUMS="1"),
        "defaults": {},
    }
    done = subprocess.run(
        [sys.executable, "-c", VARIANTS_DRIVER, json.dumps(switches)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        env=driver_env(*SWITCHES_OFF, KIMI_PROGRAMS="5", KIMI_GPU_TILES="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["split", "defaults"])
def test_the_split_down_projection_gives_the_same_bits(variants, name):
    plain, split = variants["none"], variants[name]
    assert (plain["split"], split["split"]) == (0, 1)
    assert split["pieces"] > 2 * split["programs"]  # several pieces a program
    assert split["bitwise"]
    # Every tile's count is back at zero for the next layer and the next step.
    assert set(split["counts"]) == {0} and len(split["counts"]) > 1


def test_the_down_projection_s_pieces_counted_once_a_program_give_the_same_bits(variants):
    """KIMI_LATE_COUNT=1: each program counts all its pieces together after the last one (one
    lane a piece) instead of after each; the tile's last piece counted still sums its experts
    in the same order, so the answer is the split kernel's bit for bit, and every count is back
    at zero."""
    late, split = variants["late_count"], variants["split"]
    assert (split["late_count"], late["late_count"]) == (0, 1) and late["split"] == 1
    assert late["lanes"] * late["programs"] >= late["pieces"] > 2 * late["programs"]
    assert late["bitwise"] and set(late["counts"]) == {0}


@pytest.mark.parametrize("name", ["route_once", "defaults"])
def test_the_top_k_computed_once_gives_the_same_bits(variants, name):
    plain, once = variants["none"], variants[name]
    assert (plain["route_once"], once["route_once"]) == (0, 1)
    assert once["bitwise"]
    count, idx = once["route"][0], once["route"][1 : 1 + once["nap"]]
    # The router tiles' count is back at zero, and the last layer's top-k was left there:
    # distinct experts in range (a route never written reads all zeros).
    assert count == 0
    chosen = idx[: once["nact"]]
    assert len(set(chosen)) == once["nact"] and all(0 <= e < once["experts"] for e in chosen)
    assert plain["route"] == [0] * len(plain["route"])  # without the switch it stays untouched


def test_the_shared_expert_in_pieces_of_its_inputs_gives_the_same_answer(variants):
    split, plain = variants["split_shared"], variants["none"]
    assert (plain["split_sh"], split["split_sh"]) == (1, 2) and split["groups_a_piece"] >= 1
    # Its sums are grouped by piece: close to the unsplit kernel's, not its bits.
    assert split["worst_cos"] > 0.99999
    assert set(split["counts"]) == {0}  # every tile's count back at zero


def test_the_attention_with_one_bf16_part_is_close_but_not_the_same_bits(variants):
    """KIMI_ATT_LO=0: the query and the probabilities rounded to bf16 once, three tensor-core
    products a block instead of five. Not the bits of two parts (so the switch does something),
    and close to them at every output and state."""
    plain, single = variants["none"], variants["attention_bf16"]
    assert (plain["att_lo"], single["att_lo"]) == (1, 0)
    assert not single["bitwise"]
    assert single["worst_cos"] > 0.9999, single["worst_cos"]


def test_the_group_sums_left_in_the_slot_give_the_same_answer(variants):
    """KIMI_GROUP_SUMS=1: the normed input's sum over each group of 128 is computed once, into
    the slot, and read by every int4 tile that takes the slot as its input (KDA_IN, the shared
    expert, MOE_UP, MLA_IN) instead of added up by each. Summed in another order, yet the same
    bits here: a float32 sum of 128 bf16 values rarely rounds. (Sums 10% off read a cosine of
    0.81, tried 2026-12-06.)"""
    plain, sums = variants["none"], variants["group_sums"]
    assert (plain["group_sums"], sums["group_sums"]) == (0, 1)
    assert sums["worst_cos"] > 0.99999, sums["worst_cos"]
    assert sums["bitwise"]


def test_the_switches_are_on_by_default(variants):
    """Unset, every switch is on but the shared expert's split, which the smoke scale's 2 groups
    do not divide by 3 (the full scale's 18 do): the answer is the kernel's with every switch
    off, bit for bit (the two tests above take the defaults as the split and the top-k computed
    once together)."""
    default = variants["defaults"]
    assert (default["split"], default["route_once"], default["bar_count"], default["att_lo"]) == (1, 1, 1, 1)
    assert default["group_sums"] == 0 and default["late_count"] == 0  # (until a GPU has timed them)
    assert default["split_sh"] == 1 and default["groups_a_piece"] == 2
    assert default["bitwise"]


# The layout alone, without a model (one interpreter for the three tests below): the full scale's
# defaults; a split of the shared expert that does not divide its groups, as the environment
# asks for one; and tune.py's overrides, which bypass the environment's check, so the layout
# checks itself after them.
LAYOUT_DRIVER = """
import json, os, sys
sys.path[:0] = ["tasks/02_kimi_linear_decode", "examples/02_kimi_linear_decode"]
import reference as ref, shapes, solution
c = solution.Layout.of(ref.build_config(shapes.SHAPES[0]), 132, gpu=False, gpu_tiles=True).consts
names = ("SPLIT_F", "ROUTE_ONCE", "SPLIT_SH", "BN_SH", "BAR_COUNT", "ATT_LO", "GROUP_SUMS", "LATE_COUNT", "QP", "SLOT",
         "HID")
cfg = ref.build_config(shapes.SMOKE_SHAPES[0])
os.environ["KIMI_SPLIT_SH"] = "3"
try:
    # As a model's first step reads it, on the interpreter's grid.
    solution.Layout.of(cfg, solution.INTERPRETER_PROGRAMS, gpu=False, gpu_tiles=False)
    split_sh_3 = None
except ValueError as error:
    split_sh_3 = str(error)
del os.environ["KIMI_SPLIT_SH"]
refused = {}
for name, overrides in json.loads(sys.argv[1]).items():
    layout = solution.Layout.of(cfg, 5, gpu=False, gpu_tiles=True)
    layout.consts.update(overrides)
    try:
        layout.check()
        refused[name] = None
    except ValueError as error:
        refused[name] = str(error)
print(json.dumps({"full_scale": {k: c[k] for k in names}, "split_sh_3": split_sh_3, "refused": refused}))
"""


@pytest.fixture(scope="module")
def layouts() -> dict:
    cases = {
        "as_built": {},
        "split_4": {"SPLIT_SH": 4},
        "chunks_4": {"GC_SH": 4},
        "wide_tile": {"BN_F": 96},
        "narrow_tile": {"BN_F": 4},
    }
    done = subprocess.run(
        [sys.executable, "-c", LAYOUT_DRIVER, json.dumps(cases)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=driver_env(*SWITCHES_OFF),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_at_full_scale_the_default_layout_splits_the_shared_expert_in_three_with_wide_tiles(layouts):
    consts = dict(layouts["full_scale"])
    slot, hid = consts.pop("SLOT"), consts.pop("HID")
    assert consts == {
        "SPLIT_F": 1,
        "ROUTE_ONCE": 1,
        "SPLIT_SH": 3,
        "BN_SH": 32,
        "BAR_COUNT": 1,
        "ATT_LO": 1,
        "GROUP_SUMS": 0,
        "LATE_COUNT": 0,
        "QP": 8,
    }  # (648 pieces of the down projection on 132 programs: 5 a program at most)
    # A program's slot: the vector and its group sums, in whole 128-byte lines (with room for
    # the sums only, every other program's slot lost its 16-byte alignment: 8-byte loads).
    assert slot >= hid + hid // 128 and slot % 32 == 0


def test_a_split_of_the_shared_expert_that_does_not_divide_its_groups_is_refused(layouts):
    assert layouts["split_sh_3"] is not None and "KIMI_SPLIT_SH=3" in layouts["split_sh_3"]


def test_a_layout_overridden_as_tune_does_is_checked_again(layouts):
    refused = layouts["refused"]
    assert refused["as_built"] is None
    assert "SPLIT_SH=4 does not divide" in refused["split_4"]
    assert "GC_SH=4 does not divide" in refused["chunks_4"]
    assert "BN_F=96 does not divide" in refused["wide_tile"]
    # Narrower tiles of the down projection, more pieces than LATE_COUNT's lanes hold.
    assert "lanes do not hold a program's share" in refused["narrow_tile"]
