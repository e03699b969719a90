"""`kagent sweep`: many ordinary kagent runs (tasks × models × branches) on every GPU there is.

- ``plan``: what a sweep is (its settings) and its members, each an ordinary run with an id the
  sweep chose, so that the sweep always knows where each one lives.
- ``record``: the sweep's own record, ``sweep.jsonl``: typed, versioned entries, appended by the
  driver alone and folded into each member's state.
- ``member``: drives one member as `kagent run` / `kagent resume` subprocesses, on any engine;
  a member that crashes cannot take the driver down, and a cut one goes on from its trace.
- ``engines``: where members run: local processes (one slot per GPU share) or Ray tasks.
- ``driver``: the sweep itself: launching, budgets, recording, resuming.
- ``usage``: each GPU's busy fraction, from the device leases' records and nvidia-smi.
- ``board``: the live status table, the board at the end and the sweep's JSON.
"""
