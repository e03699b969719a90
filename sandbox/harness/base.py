"""What every kind of evaluation shares: phases, check events, the trusted environment."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from . import bandwidth, environment, launches, timing
from .loading import CandidateError, DiskCache, TaskError, candidate_call
from .protocol import Channel

# What the harness measures and judges with, by dotted name: (owner, attribute) pairs looked up
# afresh at every integrity check. A solution that rebinds one of them could fake its timing or
# its correctness, even where the harness bound its own copy at import (a later harness edit
# might not), so any rebinding is reported as tampering.
_WATCHED = (
    ("time", time, "perf_counter"), ("time", time, "perf_counter_ns"), ("time", time, "time"),
    ("torch.cuda", torch.cuda, "Event"), ("torch.cuda.Event", torch.cuda.Event, "record"),
    ("torch.cuda.Event", torch.cuda.Event, "elapsed_time"), ("torch.cuda", torch.cuda, "synchronize"),
    ("torch.nn.functional", torch.nn.functional, "cosine_similarity"), ("torch", torch, "dot"),
    ("torch.Tensor", torch.Tensor, "item"),
)


class Integrity:
    """Identities of the harness's clocks, comparators and trusted models, taken before the
    candidate is imported; ``changes`` names each one that is no longer the same object."""

    def __init__(self, trusted: dict[str, torch.nn.Module]):
        self._snapshot: dict[str, tuple[Any, str, Any]] = {}
        for label, owner, attribute in _WATCHED:
            self._watch(f"{label}.{attribute}", owner, attribute)
        for who, model in trusted.items():
            for module in model.modules():
                cls = type(module)
                for method in ("step", "forward"):
                    # The class's method (what every instance runs) and the instance's own
                    # dict: a method assigned to one trusted instance shadows its class's.
                    self._watch(f"the {who}'s {cls.__name__}.{method}", cls, method)
                    self._snapshot[f"the {who}'s {cls.__name__} instance {method} ({id(module):x})"] = (
                        vars(module), method, vars(module).get(method))

    def _watch(self, label: str, owner: Any, attribute: str) -> None:
        self._snapshot.setdefault(label, (owner, attribute, getattr(owner, attribute, None)))

    def changes(self) -> list[str]:
        changed = []
        for label, (owner, attribute, original) in self._snapshot.items():
            now = owner.get(attribute) if isinstance(owner, dict) else getattr(owner, attribute, None)
            if now is not original:
                changed.append(label.split(" (")[0])
        return sorted(set(changed))


class EvaluationBase:
    def __init__(self, job: dict, channel: Channel):
        self.job = job
        self.channel = channel
        self.device = torch.device(job["device"])
        self.cache = DiskCache(Path(job["cache_dir"]) if job.get("cache_dir") else None,
                               Path(job["cache_staging"]) if job.get("cache_staging") else None)
        self.phase_seconds: dict[str, float] = {}
        self.hidden_seeds: list[int] = []
        self._phase_start = time.perf_counter()
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise TaskError(f"device {self.device} asked for, but torch {torch.__version__} sees no CUDA device")
        self.environment = environment.describe(self.device)
        self.channel.send("environment", **self.environment)

    def phase(self, name: str) -> None:
        """Close the phase that has been running since the last call, under ``name``."""
        now = time.perf_counter()
        self.phase_seconds[name] = round(now - self._phase_start, 3)
        self._phase_start = now
        self.channel.send("phase", name=name, seconds=self.phase_seconds[name])

    def watch_integrity(self, trusted: dict[str, torch.nn.Module]) -> None:
        """Take the identities the integrity check compares against; call before the
        candidate is imported."""
        self.integrity = Integrity(trusted)

    def integrity_holds(self, when: str) -> bool:
        """False (and a failed "integrity" check) when the solution replaced anything watched.

        Sent only on failure: a passing integrity check would add nothing to the record."""
        changed = self.integrity.changes()
        if not changed:
            return True
        return self.send_check("integrity", "fail", f"the solution replaced {', '.join(changed)} ({when})",
                               replaced=changed, tampering=True)

    def no_hidden_work(self, candidate: timing.Player, walls: list[timing.RoundWall], label: str,
                       synced_steps: int) -> bool:
        """False (and a failed "hidden_work" check) when the candidate's device work escaped
        the timer: the rounds' synchronized wall time against their intervals, then steps
        timed one by one, each by its events and by the host with the device synchronized.

        CUDA only: on the CPU every interval brackets the whole call on the host, nothing can
        run outside it, and the host's own scheduling noise would only cause false alarms."""
        if self.device.type != "cuda":
            return True
        hidden = [why for why in map(timing.hidden_work, walls) if why]
        if hidden:
            return self.send_check("hidden_work", "fail", f"{label}: {hidden[0]}", rounds=[vars(w) for w in walls])
        try:
            seen = timing.synced_steps(self.device, candidate, synced_steps)
        except CandidateError as err:
            return self.send_check("hidden_work", "error", err.message, details=err.details)
        why = timing.untimed_work(seen)
        if why:
            return self.send_check("hidden_work", "fail", f"{label}: {why}", steps=[vars(s) for s in seen])
        return True

    def seal_cache(self) -> None:
        """Called just before the candidate is loaded: nothing is written to the cache after
        this, and the agent side keeps only the files listed here, unchanged."""
        self.channel.send("cache_sealed", files=self.cache.seal())

    def send_check(self, name: str, status: str, reason: str, **extra: Any) -> bool:
        self.channel.send("check", name=name, status=status, reason=reason, **extra)
        return status == "pass"

    def bandwidth(self) -> dict:
        bw = bandwidth.copy_bandwidth(self.device, self.environment, self.cache)
        self.channel.send("bandwidth", **bw)
        return bw

    def clocks(self) -> dict:
        return environment.gpu_clocks(self.device.index or 0) if self.device.type == "cuda" else {}

    def report_launches(self, who: str, step: Callable[[], Any], cache_key: str | None = None,
                        **context: Any) -> None:
        """Profile one warmed call of ``step`` and send what ran on the device.

        With ``cache_key`` (the trusted baseline, whose launches never change for a given task,
        device and torch) the report is measured once and then read from the cache."""
        cached = self.cache.load("launches", cache_key, torch.device("cpu")) if cache_key else None
        if cached is not None:
            self.channel.send("launches", who=who, **context, **cached, cached=True)
            return

        def one_step() -> None:
            candidate_call(f"{who} step", step)

        try:
            one_step()  # warm
            report = launches.count_launches(self.device, one_step)
        except CandidateError as err:
            report = {"launches": None, "note": err.message}
        if cache_key and report.get("launches") is not None:
            self.cache.store("launches", cache_key, report)
        self.channel.send("launches", who=who, **context, **report)
