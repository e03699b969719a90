"""What the model can call during a run: file, shell, jobs, compile, baseline, check, benchmark, profile tools,
and the stage instruments."""
from __future__ import annotations

from kagent.tools.base import Tool, ToolContext, ToolError, ToolOutcome
from kagent.tools.baseline import Baseline
from kagent.tools.compile import Compile
from kagent.tools.evaluation import Benchmark, Check, Profile
from kagent.tools.files import EditFile, ListFiles, ReadFile, WriteFile
from kagent.tools.intermediates import ReferenceDump
from kagent.tools.jobs import Jobs
from kagent.tools.ncu import NcuKernel
from kagent.tools.shell import Shell
from kagent.tools.stages import Stages

__all__ = ["Tool", "ToolContext", "ToolError", "ToolOutcome", "default_tools"]


def default_tools() -> list[Tool]:
    """The tools the model gets in every run (the loop adds design, revert and finish itself)."""
    return [ReadFile(), ListFiles(), WriteFile(), EditFile(), Shell(), Jobs(), Compile(), Baseline(), Check(),
            Benchmark(), Profile(), Stages(), ReferenceDump(), NcuKernel()]
