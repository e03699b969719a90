"""The GPU side of an evaluation.

Everything in this package runs inside the child process that loads a candidate solution,
on whatever machine has the GPU. It therefore imports only torch, numpy, pyyaml and the
standard library, never kagent's own agent-side modules, and it reports through plain JSON
lines that the agent side validates into its pydantic models (kagent.sandbox.results).

The agent side copies this folder, unchanged, into a read-only bundle next to a copy of the
task, and runs it there as the package ``kagent_harness``; the same files are importable as
``kagent.sandbox.harness`` for the tests. Imports inside the package are relative for that
reason.
"""
