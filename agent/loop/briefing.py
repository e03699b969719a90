"""What the first message says besides the task: the machine, the goal in numbers, and how the
run treats the model's work (caps, reverts, evaluations). A frontier model otherwise spends its
first calls probing for these, or learns them by losing work."""

from __future__ import annotations

from kagent.agent.loop.ledger import GOAL_FLOOR_FRACTION
from kagent.agent.settings import RunConfig
from kagent.agent.storage.workspace import SCRATCH_DIR
from kagent.sandbox.bundle import MAX_COPIED_FILE_BYTES, MAX_SOLUTION_BYTES
from kagent.tasks import TaskRef
from kagent.tools.jobs import DEFAULT_WAIT_S

# The model's notes, in the workspace: kept as they are through every revert, and shown in full
# after every compaction, so that what a long run learned outlives its conversation.
NOTES_FILE = "notes.md"


def goal_text(task: TaskRef) -> str:
    if not task.wants_single_launch:
        return (
            "The goal: the highest score, the geometric mean over the timed shapes of the baseline's time over "
            "yours, with every correctness check passed."
        )
    return (
        f"The goal in numbers: every timed step in ONE kernel launch, as near the bytes floor as you can get, "
        f"at least {GOAL_FLOOR_FRACTION:.0%} of its speed (benchmark reports '% of the bytes floor' per shape); "
        f"the score is the geometric mean over the timed shapes of the baseline's time over yours. A finish while "
        f"over a quarter of the budget remains and that goal is unmet is answered with what remains."
    )


def rules_text(config: RunConfig, task: TaskRef) -> str:
    """How the run treats the model's work, in numbers."""
    return "\n".join(
        [
            "How this run works:",
            f"- Caps: a tool result shows at most {config.tool_output_chars:,} characters (a longer one keeps its "
            f"head and tail; read_file pages through a file); an answer holds at most {config.max_output_tokens:,} "
            f"tokens, thinking included (write a large file in parts); a check or benchmark may take "
            f"{config.eval_timeout_s / 60:.0f} min; `jobs` runs long commands in the background and "
            f"`jobs` action=wait blocks until one ends (up to {DEFAULT_WAIT_S:.0f} s by default).",
            f"- An answer without a tool call is answered with a reminder; {config.max_text_answers} in a row end "
            f"the run. The same failing call {config.max_repeated_failures} times in a row ends it too.",
            f"- Each check or benchmark of {config.solution_name} is an attempt, committed on "
            f"refs/kagent/attempts/N. Only a benchmark that passes becomes a result: a check only passes or fails. "
            f"An attempt in several launches per step still passes and scores (a single launch ranks above it).",
            f"- A failed attempt or a regression reverts the solution's files ({config.solution_name} and the files "
            f"it names) to the best attempt, unless design said draft=true. Files made since, {SCRATCH_DIR}/ and "
            f"{NOTES_FILE} are never reverted; the reverted version stays on its attempt's ref, and "
            f"revert(attempt=N) brings it back. Keep scratch scripts, dumps and probes in {SCRATCH_DIR}/.",
            f"- An evaluation runs a copy of the workspace in a new process from an empty working directory: "
            f"build/, {SCRATCH_DIR}/, hidden files and any file over {MAX_COPIED_FILE_BYTES >> 20} MiB are not "
            f"copied, and over {MAX_SOLUTION_BYTES >> 20} MiB in all it is refused.",
            "- Scratch scripts (not the solution) may use the reference to compare stage by stage: from the "
            'workspace, `import sys; sys.path.insert(0, "task"); import reference`.',
        ]
    )
