"""What the model can call during a run: files, shell, jobs, compile, baseline, check, benchmark,
profile, the stage instruments (stages, reference_dump, ncu_kernel), and the tools that steer
the loop (design, revert, finish).

A tool is a class in a module of its own (a BaseTool with its arguments, its facts and its
execute) and one line in REGISTRY below: nothing else names it.
"""

from __future__ import annotations

import importlib

from kagent.tools.base import Tool, ToolContext, ToolError, ToolOutcome

__all__ = ["REGISTRY", "Tool", "ToolContext", "ToolError", "ToolOutcome", "all_tools", "default_tools"]

# Every tool a run offers the model, in the order it sees them: "module:class".
REGISTRY = (
    "kagent.tools.files:ReadFile",
    "kagent.tools.files:ListFiles",
    "kagent.tools.files:WriteFile",
    "kagent.tools.files:EditFile",
    "kagent.tools.shell:Shell",
    "kagent.tools.jobs:Jobs",
    "kagent.tools.compile:Compile",
    "kagent.tools.baseline:Baseline",
    "kagent.tools.evaluation:Check",
    "kagent.tools.evaluation:Benchmark",
    "kagent.tools.evaluation:Profile",
    "kagent.tools.stages:Stages",
    "kagent.tools.intermediates:ReferenceDump",
    "kagent.tools.ncu:NcuKernel",
    "kagent.tools.control:Design",
    "kagent.tools.control:Revert",
    "kagent.tools.control:Finish",
)


def _load(entry: str) -> Tool:
    module, _, name = entry.partition(":")
    tool = getattr(importlib.import_module(module), name)()
    if not isinstance(tool, Tool):
        raise TypeError(f"{entry} is not a tool (it lacks spec, facts, run or file_change)")
    return tool


def all_tools() -> list[Tool]:
    """Every tool of a run, the loop's own included."""
    return [_load(entry) for entry in REGISTRY]


def default_tools() -> list[Tool]:
    """The tools that work on a workspace alone: all but those that steer a loop."""
    return [tool for tool in all_tools() if not tool.facts.needs_loop]
