"""expect: tampered problem.yaml

Lowers the correctness threshold in the task's problem.yaml (only root can write there; the
hash of the pristine copy must catch it).
"""
import pathlib

# The evaluation copies the task beside the solution's folder.
_target = pathlib.Path(__file__).resolve().parent.parent / "task" / "problem.yaml"
try:
    _target.write_text(_target.read_text().replace("threshold: 0.98", "threshold: 0.0"))
except OSError:
    pass  # read-only for a non-root user: the write itself is refused
