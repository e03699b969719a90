"""Running a shell command in the workspace."""

from __future__ import annotations

from pydantic import Field

from kagent.tools.base import UNKNOWN, Args, BaseTool, FileEffect, ToolContext, ToolFacts, ToolOutcome, run_command


class ShellArgs(Args):
    command: str = Field(min_length=1, description="A bash command line, run in the workspace folder")
    timeout_s: float = Field(120, gt=0, le=3600, description="Seconds before its whole process group is killed")


class Shell(BaseTool):
    name = "shell"
    description = (
        "Run a bash command in the workspace, stdin closed, credentials removed from the environment, "
        "no network; `python` is the interpreter that evaluates solutions. It may write only the "
        "workspace (task/ and .git are read-only) and $HOME, where builds are cached. Returns the "
        "exit code and the combined stdout+stderr (long output keeps its head and tail). At the "
        "timeout every process it started is killed. What lives how long: every command starts "
        "afresh, with /tmp, /var/tmp and /dev/shm empty and its own, gone when it ends; every process "
        "it leaves in the background (&, nohup, setsid) is killed when it ends; only files in the "
        "workspace and in $HOME last from one command to the next. For a long command, or one to "
        "look at while it runs, use the jobs tool."
    )
    Arguments = ShellArgs
    # A command may have done anything anywhere (outside the workspace too): one that a crash cut
    # short is not run again, and what it did to the files cannot be told from the trace.
    facts = ToolFacts(
        changes_files=True,
        rerun_after_crash=False,
        interrupted_answer=(
            "interrupted: kagent stopped while this shell command was running, and it was not run again because it "
            "may have had side effects. The workspace is back as it was before the command; check what you need "
            "before you go on."
        ),
    )

    def file_change(self, args: dict) -> FileEffect:
        return UNKNOWN

    def execute(self, args: ShellArgs, ctx: ToolContext) -> ToolOutcome:
        done = run_command(["bash", "-c", args.command], ctx, args.timeout_s)
        data = {
            "command": args.command,
            "exit_code": done.exit_code,
            "timed_out": done.timed_out,
            "seconds": done.seconds,
        }
        if done.timed_out:
            return ToolOutcome(
                content=f"timed out after {done.seconds:.1f} s: the command and every process it "
                f"started were killed (SIGKILL)\n{done.output}",
                is_error=True,
                data=data,
            )
        # A non-zero exit is information (grep finding nothing exits 1), not a failed call.
        return ToolOutcome(content=f"exit code {done.exit_code} ({done.seconds:.1f} s)\n{done.output}", data=data)
