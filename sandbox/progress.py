"""What an evaluation has just done, in a few words, from the harness's events as they arrive
(kagent.sandbox.evaluate passes them on): the live view of a run and `kagent eval` show it."""

from __future__ import annotations

from typing import Optional


def describe(event: dict) -> Optional[str]:
    """One short line for an event worth showing, or None."""
    kind = event.get("event")
    if kind == "phase":
        return f"{str(event.get('name', '?')).replace('_', ' ')} done ({float(event.get('seconds', 0)):.1f} s)"
    if kind == "check":
        return f"check {event.get('name', '?')}: {event.get('status', '?')}"
    if kind == "timing":
        return f"timed {event.get('label', '?')}: {float(event.get('speedup', 0)):.3f}x"
    if kind == "launches":
        return f"launches counted ({event.get('who', '?')})"
    if kind == "watchdog":
        compilers = ", ".join(event.get("compilers") or []) or "Triton writing its cache"
        return f"a step running {float(event.get('seconds', 0)):.0f} s: still compiling ({compilers})"
    if kind == "device_memory_ran_out":
        return "the device's memory ran out while shared: evaluating again with the device alone"
    if kind == "bandwidth":
        return "copy bandwidth " + ("read from the cache" if event.get("cached") else "measured")
    return None
