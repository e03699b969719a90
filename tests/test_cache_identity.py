"""The disk cache trusts an entry only when its record vouches for it: built under this
identity (the task and harness that made it), and the payload unchanged since."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import pytest
import torch

from kagent.sandbox.bundle import promote_cache
from kagent.sandbox.harness import loading
from kagent.sandbox.harness.loading import DiskCache

CPU = torch.device("cpu")


def _value() -> dict:
    return {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(4)}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _unbuildable() -> dict:
    pytest.fail("rebuilt an entry that should have been a hit")


def test_store_then_load_is_a_hit_and_the_record_says_what_it_holds(tmp_path: Path):
    cache = DiskCache(tmp_path, identity="task-a")
    cache.store("weights", "k", _value())
    loaded = cache.load("weights", "k", CPU)
    assert loaded is not None and _same(loaded, _value())
    assert (cache.hits, cache.misses) == (1, 0)
    payload = tmp_path / "weights" / "k.pt"
    record = json.loads((tmp_path / "weights" / "k.pt.json").read_text())
    assert record["identity"] == "task-a" and record["entry"] == "weights/k.pt"
    assert record["bytes"] == payload.stat().st_size
    assert record["piece_sha256"] == loading.piece_sha256s(payload.read_bytes(), record["piece_bytes"])
    assert not [p for p in tmp_path.rglob("*.tmp")]  # the atomic writes left nothing behind


def test_an_entry_of_another_identity_is_rebuilt_and_then_a_hit(tmp_path: Path):
    DiskCache(tmp_path, identity="old harness").store("outputs", "k", {"w": torch.zeros(3)})
    cache = DiskCache(tmp_path, identity="new harness")
    built = []
    value = cache.get_or_build("outputs", "k", CPU, lambda: built.append(1) or _value())
    assert built == [1] and cache.misses == 1 and _same(value, _value())
    again = DiskCache(tmp_path, identity="new harness")
    assert _same(again.get_or_build("outputs", "k", CPU, _unbuildable), _value()) and again.hits == 1
    # The old identity's entry was replaced, not kept beside it.
    assert DiskCache(tmp_path, identity="old harness").load("outputs", "k", CPU) is None


def test_without_an_identity_any_recorded_entry_that_verifies_is_a_hit(tmp_path: Path):
    DiskCache(tmp_path, identity="someone").store("weights", "k", _value())
    assert _same(DiskCache(tmp_path).load("weights", "k", CPU), _value())


def test_a_payload_changed_after_storing_is_a_miss(tmp_path: Path):
    cache = DiskCache(tmp_path, identity="task-a")
    cache.store("weights", "k", _value())
    payload = tmp_path / "weights" / "k.pt"
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one byte: the size stays, only the hash can tell
    payload.write_bytes(bytes(data))
    assert cache.load("weights", "k", CPU) is None and cache.misses == 1
    rebuilt = cache.get_or_build("weights", "k", CPU, _value)
    assert _same(rebuilt, _value()) and _same(cache.load("weights", "k", CPU), _value())


def test_a_payload_of_many_pieces_verifies_and_a_change_in_any_piece_is_a_miss(tmp_path: Path, monkeypatch):
    """Pieces hashed by threads side by side, in order: the record vouches for the whole."""
    monkeypatch.setattr(loading, "RECORD_CHUNK_BYTES", 4096)
    cache = DiskCache(tmp_path, identity="task-a")
    cache.store("weights", "k", {"w": torch.arange(20000, dtype=torch.float32)})
    record = json.loads((tmp_path / "weights" / "k.pt.json").read_text())
    assert record["piece_bytes"] == 4096 and len(record["piece_sha256"]) == -(-record["bytes"] // 4096) > 16
    assert cache.load("weights", "k", CPU) is not None
    payload = tmp_path / "weights" / "k.pt"
    data = bytearray(payload.read_bytes())
    data[-5000] ^= 0x01  # in the second-to-last piece
    payload.write_bytes(bytes(data))
    assert cache.load("weights", "k", CPU) is None


def test_a_mismatching_payload_is_never_unpickled(tmp_path: Path, monkeypatch):
    cache = DiskCache(tmp_path, identity="task-a")
    cache.store("weights", "k", _value())
    (tmp_path / "weights" / "k.pt").write_bytes(pickle.dumps("not what the record says"))
    monkeypatch.setattr(torch, "load", lambda *a, **kw: pytest.fail("torch.load ran on an unverified file"))
    assert cache.load("weights", "k", CPU) is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda record: record.unlink(),  # an entry from a kagent before records
        lambda record: record.write_text("{not json"),
        lambda record: record.write_text("[1, 2]"),
        lambda record: record.write_text(json.dumps({**json.loads(record.read_text()), "format": 0})),
        lambda record: record.write_text(json.dumps({**json.loads(record.read_text()), "entry": "weights/other.pt"})),
        lambda record: record.write_text(json.dumps({**json.loads(record.read_text()), "piece_sha256": ["0" * 64]})),
        lambda record: record.write_text(json.dumps({**json.loads(record.read_text()), "bytes": 1})),
        lambda record: record.write_text(json.dumps({**json.loads(record.read_text()), "piece_bytes": 0})),
        # A record of format 1 (one sha256 of the whole payload), right for its payload: rebuilt once.
        lambda record: record.write_text(
            json.dumps(
                {
                    "format": 1,
                    "entry": "weights/k.pt",
                    "identity": "task-a",
                    "bytes": record.with_suffix("").stat().st_size,
                    "sha256": hashlib.sha256(record.with_suffix("").read_bytes()).hexdigest(),
                }
            )
        ),
    ],
    ids=[
        "missing",
        "garbled",
        "not-an-object",
        "old-format",
        "other-entry",
        "other-hash",
        "other-size",
        "no-piece-size",
        "format-1",
    ],
)
def test_a_missing_or_garbled_record_is_a_miss_and_rebuilt(tmp_path: Path, damage):
    cache = DiskCache(tmp_path, identity="task-a")
    cache.store("weights", "k", _value())
    damage(tmp_path / "weights" / "k.pt.json")
    assert cache.load("weights", "k", CPU) is None and (cache.hits, cache.misses) == (0, 1)
    built = []
    cache.get_or_build("weights", "k", CPU, lambda: built.append(1) or _value())
    assert built == [1] and _same(cache.load("weights", "k", CPU), _value())


def test_seal_lists_the_record_and_a_promoted_pair_is_a_hit_from_the_cache(tmp_path: Path):
    staging, root = tmp_path / "staging", tmp_path / "cache"
    harness = DiskCache(root, staging, identity="task-a")
    harness.get_or_build("outputs", "k", CPU, _value)
    sealed = harness.seal()
    assert sorted(sealed) == ["outputs/k.pt", "outputs/k.pt.json"]
    promoted = promote_cache(staging, root, [{"event": "cache_sealed", "files": sealed}])
    assert sorted(promoted) == sorted(sealed)
    later = DiskCache(root, tmp_path / "later-staging", identity="task-a")
    assert _same(later.get_or_build("outputs", "k", CPU, _unbuildable), _value()) and later.hits == 1
    assert DiskCache(root, identity="task-b").load("outputs", "k", CPU) is None
