"""What crosses between the referee and the solution's process: the tagged value trees, the
arena's slots, and the strict copy of what a solution returns."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from kagent.sandbox.harness.exchange import (
    Arena,
    BadReturn,
    ExchangeError,
    Layout,
    SlotAllocator,
    bytes_needed,
    decode,
    encode,
    fill,
)


@dataclasses.dataclass(frozen=True)
class _Config:
    hidden: int = 256
    pattern: tuple = ("K", "M")
    dtype: torch.dtype = torch.bfloat16
    eps: float = 1e-6


@pytest.fixture
def arena(tmp_path) -> Arena:
    made = Arena.create(torch.device("cpu"), 1 << 16, tmp_path)
    yield made
    made.close()


def _put(arena: Arena):
    slots = SlotAllocator(arena)

    def put(value):
        slot = slots.slot(tuple(value.shape), value.dtype)
        if isinstance(value, torch.Tensor):
            arena.view(slot).copy_(value)
        return slot

    return put


def test_a_config_crosses_as_json_and_comes_back_as_an_equal_dataclass(arena):
    node = encode([_Config(hidden=128)], _put(arena))
    (config,) = decode(json.loads(json.dumps(node)), arena.view)
    assert dataclasses.is_dataclass(config) and type(config).__name__ == "_Config"
    assert dataclasses.asdict(config) == dataclasses.asdict(_Config(hidden=128))
    assert config.pattern == ("K", "M") and config.dtype is torch.bfloat16
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hidden = 1


def test_tensors_cross_through_the_arena_and_keep_their_structure(arena):
    hidden = torch.randn(8).to(torch.bfloat16)
    state = [{"S": torch.randn(2, 3)}, {"c_kv": torch.arange(6, dtype=torch.int32).reshape(3, 2)}]
    node = json.loads(json.dumps(encode((hidden, state), _put(arena))))
    got_hidden, got_state = decode(node, lambda slot: arena.view(slot).clone())
    assert torch.equal(got_hidden, hidden) and got_hidden.dtype == torch.bfloat16
    assert isinstance(got_state, list) and torch.equal(got_state[1]["c_kv"], state[1]["c_kv"])
    assert torch.equal(got_state[0]["S"], state[0]["S"])


def test_values_that_cannot_cross_are_refused(arena):
    with pytest.raises(ExchangeError):
        encode(object(), _put(arena))
    with pytest.raises(ExchangeError):
        encode({1: 2}, _put(arena))
    with pytest.raises(ExchangeError):
        decode({"x": 1}, arena.view)


def test_a_slot_outside_the_arena_is_refused(arena):
    with pytest.raises(ExchangeError):
        arena.view({"offset": arena.nbytes - 256, "dtype": "float32", "shape": [1024]})
    with pytest.raises(ExchangeError):
        arena.view({"offset": 3, "dtype": "float32", "shape": [1]})  # not aligned
    with pytest.raises(ExchangeError):
        SlotAllocator(arena).slot((arena.nbytes,), torch.float32)


def test_bytes_needed_covers_what_the_slots_take(arena):
    tree = (Layout((5, 7), torch.float32), [{"a": torch.zeros(3, dtype=torch.bfloat16)}])
    slots = SlotAllocator(arena)
    encode(tree, lambda want: slots.slot(tuple(want.shape), want.dtype))
    assert slots.used <= bytes_needed(tree)


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize(
    "returned, message",
    [
        ((torch.zeros(4).as_subclass(_Subclass), [{"S": torch.zeros(2)}]), "must be a torch.Tensor, got _Subclass"),
        ((torch.zeros(4, dtype=torch.float64), [{"S": torch.zeros(2)}]), "must be float32 of shape [4]"),
        ((torch.zeros(5), [{"S": torch.zeros(2)}]), "must be float32 of shape [4]"),
        ((torch.zeros(4), [{"T": torch.zeros(2)}]), "must have keys ['S']"),
        ((torch.zeros(4), []), "must be a sequence of 1"),
        (torch.zeros(4), "must be a sequence of 2"),
    ],
)
def test_what_a_solution_returns_must_be_exactly_what_is_expected(arena, returned, message):
    slots = SlotAllocator(arena)
    out = encode(
        (Layout((4,), torch.float32), [{"S": Layout((2,), torch.float32)}]),
        lambda want: slots.slot(tuple(want.shape), want.dtype),
    )
    with pytest.raises(BadReturn, match=message.replace("[", r"\[").replace("]", r"\]")):
        fill(out, returned, arena, "step's return value")


def test_a_right_return_is_copied_into_the_arena(arena):
    slots = SlotAllocator(arena)
    out = encode(
        (Layout((4,), torch.float32), [{"S": Layout((2,), torch.float32)}]),
        lambda want: slots.slot(tuple(want.shape), want.dtype),
    )
    fill(out, (torch.arange(4.0), [{"S": torch.ones(2)}]), arena, "step's return value")
    hidden, state = decode(out, arena.view)
    assert hidden.tolist() == [0.0, 1.0, 2.0, 3.0] and state[0]["S"].tolist() == [1.0, 1.0]


def test_the_cpu_arena_is_shared_with_whoever_maps_it(tmp_path):
    arena = Arena.create(torch.device("cpu"), 4096, tmp_path)
    other = Arena.attach(json.loads(json.dumps(arena.description)))
    slot = {"offset": 256, "dtype": "float32", "shape": [2]}
    other.view(slot).copy_(torch.tensor([1.5, -2.0]))
    assert arena.view(slot).tolist() == [1.5, -2.0]
    arena.close()
