"""The run workspace: a git repository with one commit per attempt."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kagent.agent.storage.workspace import Workspace
from kagent.core.errors import KagentError


def git(root: Path, *args: str) -> str:
    """Plain git, to check the workspace from the outside rather than through its own API."""
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def task_files(tmp_path) -> list[Path]:
    source = tmp_path / "task_src"
    (source / "data").mkdir(parents=True)
    (source / "reference.py").write_text("def ref():\n    return 1\n")
    (source / "task.yaml").write_text("name: demo\n")
    (source / "data" / "shapes.json").write_text("[1, 2]\n")
    return [source / "reference.py", source / "task.yaml", source / "data"]


@pytest.fixture
def ws(tmp_path, task_files) -> Workspace:
    return Workspace.create(tmp_path / "run", task_files, starter="def solve():\n    return 0\n")


def test_create_lays_out_the_workspace(ws, tmp_path):
    root = tmp_path / "run"
    assert ws.root == root.resolve() and ws.solution_path == ws.root / "solution.py"
    assert ws.solution_path.read_text() == "def solve():\n    return 0\n"
    assert (root / "task" / "data" / "shapes.json").read_text() == "[1, 2]\n"
    assert git(root, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(root, "config", "--local", "user.name").strip() == "kagent"
    assert git(root, "config", "--local", "user.email").strip() == "kagent@localhost"
    assert git(root, "log", "--format=%s").strip() == "attempt 0: starting point"
    assert ws.attempts() == {0: ws.head()}
    tracked = git(root, "ls-files").split()
    assert sorted(tracked) == [
        ".gitignore",
        "solution.py",
        "task/data/shapes.json",
        "task/reference.py",
        "task/task.yaml",
    ]
    assert {"build/", "__pycache__/", "*.so", "*.o", ".kagent/"} <= set((root / ".gitignore").read_text().split())
    assert not ws.dirty() and ws.best() is None


def test_task_files_are_read_only_and_recorded(ws):
    for path in (ws.root / "task").rglob("*"):
        if path.is_file():
            assert not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), path
    hashes = json.loads((ws.root / ".kagent" / "task_hashes.json").read_text())
    assert sorted(hashes) == ["task/data/shapes.json", "task/reference.py", "task/task.yaml"]
    assert ws.task_files_changed() == []


def test_task_file_edits_are_detected(ws):
    reference = ws.root / "task" / "reference.py"
    reference.chmod(0o644)  # what a determined edit (or root, which ignores modes) gets past
    reference.write_text("def ref():\n    return 2\n")
    (ws.root / "task" / "task.yaml").unlink()
    (ws.root / "task" / "extra.py").write_text("x = 1\n")
    assert ws.task_files_changed() == ["task/extra.py", "task/reference.py", "task/task.yaml"]
    (ws.root / ".kagent" / "task_hashes.json").write_text("{not json")
    with pytest.raises(KagentError):
        ws.task_files_changed()


def test_a_removed_task_folder_is_detected(ws):
    shutil.rmtree(ws.root / "task")
    assert ws.task_files_changed() == ["task/data/shapes.json", "task/reference.py", "task/task.yaml"]


def test_changed_task_files_are_put_back_as_the_task_gave_them(ws):
    reference = ws.root / "task" / "reference.py"
    original = reference.read_text()
    reference.chmod(0o644)
    reference.write_text("def ref():\n    return 2\n")
    shutil.rmtree(ws.root / "task" / "data")
    (ws.root / "task" / "extra.py").write_text("x = 1\n")
    assert ws.put_back_task_files() == ["task/data/shapes.json", "task/extra.py", "task/reference.py"]
    assert reference.read_text() == original and not (ws.root / "task" / "extra.py").exists()
    assert ws.task_files_changed() == [] and ws.put_back_task_files() == []
    assert not reference.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def test_create_refuses_bad_input(tmp_path, task_files):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(KagentError, match="not an empty folder"):
        Workspace.create(tmp_path / "busy", task_files)
    with pytest.raises(KagentError, match="does not exist"):
        Workspace.create(tmp_path / "a", [tmp_path / "missing.py"])
    twin = tmp_path / "other" / "reference.py"
    twin.parent.mkdir()
    twin.write_text("")
    with pytest.raises(KagentError, match="distinct names"):
        Workspace.create(tmp_path / "b", [task_files[0], twin])
    for name in ["task/solution.py", "../escape.py", "/abs.py", ".kagent/s.py", ""]:
        with pytest.raises(KagentError, match="solution file"):
            Workspace.create(tmp_path / "c", task_files, solution_name=name)


def test_create_without_starter_and_with_a_nested_solution_name(tmp_path, task_files):
    ws = Workspace.create(tmp_path / "run", task_files, solution_name="src/kernel.cu")
    assert ws.solution_path == ws.root / "src" / "kernel.cu" and not ws.solution_path.exists()
    ws.solution_path.parent.mkdir()
    ws.solution_path.write_text("__global__ void k() {}\n")
    ws.commit("attempt 1")
    assert Workspace.open(tmp_path / "run").solution_path == ws.solution_path


def test_commit_records_trailers(ws):
    ws.solution_path.write_text("def solve():\n    return 1\n")
    trailers = {
        "Kagent-Attempt": "1",
        "Kagent-Verdict": "pass",
        "Kagent-Speedup": "1.87",
        "Kagent-Tokens": "12345",
        "Kagent-Elapsed": "312.5",
    }
    sha = ws.commit("attempt 1: fuse the gates\n\n# why: one launch instead of three", trailers)
    assert sha == ws.head() and len(sha) == 40
    assert ws.trailers(sha) == trailers
    assert ws.trailers(ws.attempts()[0]) == {}
    # Plain git sees them as real trailers, and the '#' line of the body survived.
    assert git(ws.root, "log", "-1", "--format=%(trailers:key=Kagent-Speedup,valueonly)").strip() == "1.87"
    assert "# why: one launch instead of three" in git(ws.root, "log", "-1", "--format=%B")
    assert not ws.dirty()
    for bad in [{"Bad Key": "x"}, {"Kagent-X": "two\nlines"}, {"Kagent-X": " "}]:
        with pytest.raises(ValueError):
            ws.commit("attempt", bad)
    with pytest.raises(ValueError):
        ws.commit("  ")


def test_commit_is_allowed_when_nothing_changed(ws):
    before = ws.head()
    sha = ws.commit("attempt 1: same code, measured again", {"Kagent-Attempt": "1"})
    assert sha != before
    assert git(ws.root, "rev-parse", f"{sha}^").strip() == before
    assert git(ws.root, "diff", "--name-only", before, sha).strip() == ""


def test_commit_takes_new_files_and_leaves_ignored_ones(ws):
    (ws.root / "helpers.py").write_text("A = 1\n")
    (ws.root / "build").mkdir()
    (ws.root / "build" / "kernel.so").write_bytes(b"\x7fELF")
    (ws.root / "fast.so").write_bytes(b"\x7fELF")
    assert ws.dirty()
    sha = ws.commit("attempt 1")
    files = git(ws.root, "ls-tree", "-r", "--name-only", sha).split()
    assert "helpers.py" in files and "fast.so" not in files and "build/kernel.so" not in files
    assert not ws.dirty()


def test_attempt_refs_survive_restore(ws):
    first = ws.attempts()[0]
    ws.solution_path.write_text("slow\n")
    (ws.root / "added.py").write_text("new\n")
    bad = ws.commit("attempt 1: worse")
    ws.mark_attempt(1, bad)

    changed = ws.restore(first)
    assert changed == ["added.py", "solution.py"]
    assert not (ws.root / "added.py").exists()
    assert ws.solution_path.read_text() == "def solve():\n    return 0\n"
    back = ws.commit("attempt 2: back to attempt 0")
    ws.mark_attempt(2, back)

    assert ws.attempts() == {0: first, 1: bad, 2: back}
    # History stays linear: the failed attempt is an ancestor, and still reachable by its ref.
    assert git(ws.root, "rev-list", "--first-parent", "main").split() == [back, bad, first]
    assert git(ws.root, "show", "refs/kagent/attempts/1:added.py") == "new\n"
    assert git(ws.root, "diff", "--name-only", first, back).strip() == ""


def test_restore_handles_untracked_files_folders_and_ignored_outputs(ws):
    start = ws.head()
    (ws.root / "kernels" / "deep").mkdir(parents=True)
    (ws.root / "kernels" / "deep" / "k.py").write_text("x\n")
    (ws.root / "build").mkdir()
    (ws.root / "build" / "out.o").write_bytes(b"obj")
    (ws.root / ".gitignore").write_text("# rewritten by the model\n")  # must come back too
    ws.solution_path.unlink()

    changed = ws.restore(start)
    assert changed == [".gitignore", "kernels/deep/k.py", "solution.py"]
    assert not (ws.root / "kernels").exists()
    assert (ws.root / "build" / "out.o").read_bytes() == b"obj"
    assert ws.task_files_changed() == []  # .kagent/ survived the rewritten .gitignore
    assert ws.solution_path.exists() and not ws.dirty()
    assert ws.restore(start) == []


def test_restore_puts_back_and_protects_edited_task_files(ws):
    reference = ws.root / "task" / "reference.py"
    original = reference.read_text()
    reference.chmod(0o644)
    reference.write_text("tampered\n")
    assert ws.task_files_changed() == ["task/reference.py"]
    assert ws.restore(ws.head()) == ["task/reference.py"]
    assert reference.read_text() == original and ws.task_files_changed() == []
    assert not reference.stat().st_mode & stat.S_IWUSR


def test_mark_attempt_never_moves_an_attempt(ws):
    sha = ws.commit("attempt 1")
    ws.mark_attempt(1, sha)
    ws.mark_attempt(1, sha)  # the same again is harmless (a resumed run may repeat it)
    with pytest.raises(KagentError, match="already recorded"):
        ws.mark_attempt(0, sha)
    with pytest.raises(ValueError):
        ws.mark_attempt(-1, sha)
    with pytest.raises(KagentError, match="no commit"):
        ws.mark_attempt(5, "0" * 40)


def test_best_tag_moves(ws):
    first = ws.head()
    ws.tag_best(first)
    assert ws.best() == first
    second = ws.commit("attempt 1")
    ws.tag_best(second)
    assert ws.best() == second
    assert git(ws.root, "cat-file", "-t", "refs/tags/best").strip() == "commit"  # lightweight


def test_diff_and_changed_files(ws):
    base = ws.head()
    ws.solution_path.write_text("def solve():\n    return 42\n")
    (ws.root / "new_kernel.py").write_text("K = 1\n")
    (ws.root / "x.o").write_bytes(b"ignored")
    assert ws.changed_files(base) == ["new_kernel.py", "solution.py"]
    working = ws.diff(base)
    assert "+    return 42" in working and "+K = 1" in working and "x.o" not in working
    assert working.endswith("\n")
    # Looking at the working tree does not stage anything in the real index.
    assert git(ws.root, "diff", "--cached", "--name-only").strip() == ""
    sha = ws.commit("attempt 1")
    assert ws.diff(base, sha) == working
    assert ws.diff(sha) == "" and ws.changed_files(sha) == []
    with pytest.raises(KagentError, match="no commit"):
        ws.diff("nonsense")


def test_diffs_and_files_of_many_commits_in_one_call(ws):
    first = ws.attempts()[0]
    ws.solution_path.write_text("def solve():\n    return 42\n")
    (ws.root / "kernels").mkdir()
    (ws.root / "kernels" / "k.cu").write_text("// kernel\n")
    (ws.root / "k.o").write_bytes(b"ignored")
    second = ws.commit("attempt 1")
    third = ws.commit("attempt 2, nothing changed")
    diffs = ws.diffs([(first, second), (second, third), (third, first)])
    assert (
        diffs[second] == ws.diff(first, second) and "+    return 42" in diffs[second] and "+// kernel" in diffs[second]
    )
    assert diffs[third] == "" and diffs[first] == ws.diff(third, first) and "-// kernel" in diffs[first]
    assert ws.files(
        [
            (first, "solution.py"),
            (second, "solution.py"),
            (second, "kernels/k.cu"),
            (first, "kernels/k.cu"),
            (second, "kernels"),
            (second, "k.o"),
            (third, "solution.py"),
        ]
    ) == [
        b"def solve():\n    return 0\n",
        b"def solve():\n    return 42\n",
        b"// kernel\n",
        None,
        None,
        None,
        b"def solve():\n    return 42\n",
    ]
    assert ws.diffs([]) == {} and ws.files([]) == []
    with pytest.raises(KagentError, match="no commit '0000000000"):
        ws.diffs([(first, "0" * 40)])
    with pytest.raises(KagentError, match="no commit 'nonsense'"):
        ws.diffs([("nonsense", second)])


def test_stash_uncommitted_sets_work_aside(ws):
    head = ws.head()
    assert ws.stash_uncommitted("segment-1") is None
    ws.solution_path.write_text("half done\n")
    (ws.root / "scratch.py").write_text("notes\n")
    sha = ws.stash_uncommitted("segment-2")
    assert sha is not None
    assert ws.head() == head and git(ws.root, "rev-parse", "main").strip() == head
    assert not ws.dirty() and not (ws.root / "scratch.py").exists()
    assert ws.solution_path.read_text() == "def solve():\n    return 0\n"
    assert git(ws.root, "rev-parse", "refs/kagent/uncommitted/segment-2").strip() == sha
    assert git(ws.root, "show", f"{sha}:solution.py") == "half done\n"
    assert git(ws.root, "show", f"{sha}:scratch.py") == "notes\n"
    assert git(ws.root, "rev-parse", f"{sha}^").strip() == head
    assert ws.uncommitted() == {"segment-2": sha}
    (ws.root / "more.py").write_text("m\n")
    with pytest.raises(KagentError, match="already set aside"):
        ws.stash_uncommitted("segment-2")
    with pytest.raises(ValueError):
        ws.stash_uncommitted("bad name..")


def test_open_finds_the_workspace_again(ws):
    sha = ws.commit("attempt 1", {"Kagent-Attempt": "1"})
    ws.mark_attempt(1, sha)
    again = Workspace.open(ws.root)
    assert again.root == ws.root and again.solution_path == ws.solution_path
    assert again.attempts() == ws.attempts() and again.trailers(sha) == {"Kagent-Attempt": "1"}


def test_open_refuses_what_is_not_a_workspace(tmp_path):
    with pytest.raises(KagentError, match="does not exist"):
        Workspace.open(tmp_path / "nowhere")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(KagentError, match="not a kagent workspace"):
        Workspace.open(plain)
    other = tmp_path / "other_repo"
    other.mkdir()
    git(other, "init", "-q")
    with pytest.raises(KagentError, match="not a kagent workspace"):
        Workspace.open(other)
    (other / "sub").mkdir()
    with pytest.raises(KagentError, match="not a kagent workspace"):
        Workspace.open(other / "sub")


def test_a_folder_inside_a_workspace_is_not_one(ws):
    with pytest.raises(KagentError, match="not a kagent workspace"):
        Workspace.open(ws.root / "task")


def test_a_lock_held_by_a_zombie_is_stale_and_one_held_by_a_live_process_is_not(tmp_path):
    import os
    import socket
    import sys
    import time

    from kagent.agent.storage.lock import LOCK_NAME, RunLock, lock_holder

    def held_by(pid: int) -> None:
        (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "since": 0}))

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{dead.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)  # ended, not reaped: a zombie that os.kill(pid, 0) still finds
        os.kill(dead.pid, 0)
        held_by(dead.pid)
        assert lock_holder(tmp_path) is None
        with RunLock(tmp_path) as lock:
            assert lock.took_over == {"pid": dead.pid, "host": socket.gethostname(), "since": 0}
        held_by(-1)  # a record without a real pid: os.kill(-1, 0) would ask about every process
        assert lock_holder(tmp_path) is None
        held_by(live.pid)
        with pytest.raises(KagentError, match=f"being driven by process {live.pid}"):
            RunLock(tmp_path).__enter__()
    finally:
        live.kill()
        live.wait()
        dead.wait()
