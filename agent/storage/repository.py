"""The workspace's git repository at the level of git's own commands: how one runs (its
failures as errors a user can act on), revisions and refs read, the working tree staged into
a throwaway index, and the reads that fetch many commits' diffs or files in one git process.
What the commands are for (attempts, reverts, snapshots) is the workspace's (workspace.py).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import git

from kagent.core.errors import KagentError

T = TypeVar("T")


class Repository:
    """One workspace's git repository; the commands run in its working tree."""

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self.root = Path(repo.working_tree_dir or "").resolve()

    def run(self, *args: str, env: dict[str, str] | None = None, strip: bool = True) -> str:
        """``git ARGS`` in the working tree: its output (stripped unless ``strip`` is False)."""

        def run() -> str:
            return self.repo.git.execute(["git", *args], env=env, strip_newline_in_stdout=strip)

        return git_call(run)

    def resolve(self, rev: str) -> str:
        sha = self.try_resolve(rev)
        if sha is None:
            raise KagentError(f"no commit '{rev}' in the workspace at {self.root}")
        return sha

    def try_resolve(self, rev: str) -> str | None:
        try:
            return self.repo.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}") or None
        except git.GitCommandError:
            return None

    def refs(self, prefix: str) -> dict[str, str]:
        out = self.run("for-each-ref", "--format=%(refname) %(objectname)", prefix)
        return {ref[len(prefix) :]: sha for ref, sha in (line.split(" ", 1) for line in out.splitlines())}

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        try:
            self.repo.git.merge_base("--is-ancestor", ancestor, descendant)
        except git.GitCommandError:
            return False
        return True

    @contextmanager
    def snapshot_index(self) -> Iterator[dict[str, str]]:
        """An environment whose GIT_INDEX_FILE is a throwaway copy of the index with the whole
        working tree staged: diffs and trees can then include untracked files without
        touching the real index."""
        index = Path(self.repo.git_dir) / "index"
        with tempfile.TemporaryDirectory(prefix="kagent-index-") as folder:
            copy = Path(folder) / "index"
            if index.exists():
                shutil.copyfile(index, copy)  # keeps git's stat cache, so unchanged files are not re-hashed
            env = {"GIT_INDEX_FILE": str(copy)}
            self.run("add", "-A", env=env)
            yield env

    def batch(self, args: list[str], stdin: bytes) -> bytes:
        """A git command fed ``stdin`` whole (GitPython's execute takes no input bytes)."""
        done = subprocess.run(["git", "-C", str(self.root), *args], input=stdin, capture_output=True)
        if done.returncode != 0:
            raise KagentError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[:300]}")
        return done.stdout

    def require_commits(self, shas: set[str]) -> None:
        listed = self.batch(["cat-file", "--batch-check"], "".join(f"{sha}\n" for sha in sorted(shas)).encode())
        for sha, line in zip(sorted(shas), listed.decode().splitlines(), strict=True):
            if line.split()[1:2] != ["commit"]:
                raise KagentError(f"no commit '{sha}' in the workspace at {self.root}")

    def diffs(self, pairs: list[tuple[str, str]]) -> dict[str, str]:
        """Unified diffs, for each (old, new) pair of commits (full shas, as Workspace.attempts()
        gives them) the diff from old to new, keyed by new (empty where nothing changed). One git
        process for them all: a report diffs every attempt against the one before, and a process
        each took 10 ms."""
        self.require_commits({sha for pair in pairs for sha in pair})  # diff-tree passes over what it cannot read
        lines = "".join(f"{new} {old}\n" for old, new in pairs)  # "<commit> <parent>": the diff from parent
        out = self.batch(["diff-tree", "-p", "--no-color", "--stdin"], lines.encode()).decode(errors="replace")
        diffs = {new: "" for _old, new in pairs}
        current = None
        for line in out.splitlines(keepends=True):
            # Each commit's diff follows its id on a line of its own, which no diff line can be:
            # content lines start with a space, + or -, and header lines with a word.
            if line.rstrip("\n") in diffs:
                current = line.rstrip("\n")
            elif current is not None:
                diffs[current] += line
        return diffs

    def files(self, wanted: list[tuple[str, str]]) -> list[bytes | None]:
        """The content of each (commit, path), None where the commit has no file at that path:
        one git process for them all."""
        names = "".join(f"{sha}:{path}\n" for sha, path in wanted)
        out = self.batch(["cat-file", "--batch"], names.encode())
        found: list[bytes | None] = []
        at = 0
        for _ in wanted:
            end = out.index(b"\n", at)
            header = out[at:end].split()
            at = end + 1
            if len(header) != 3 or header[1] != b"blob":  # "<name> missing", or a folder there
                if len(header) == 3:
                    at += int(header[2]) + 1
                found.append(None)
                continue
            size = int(header[2])
            found.append(out[at : at + size])
            at += size + 1
        return found


def git_call(run: Callable[[], T]) -> T:
    """Runs ``run``, turning the git failures a user can act on into KagentError."""
    try:
        return run()
    except git.GitCommandNotFound as error:
        raise KagentError("git is not installed or not on PATH", hint="install git and try again") from error
    except git.GitCommandError as error:
        detail = (error.stderr or "").strip().removeprefix("stderr:").strip().strip("'")
        raise KagentError(f"git {' '.join(map(str, error.command[1:2]))} failed: {detail}") from error
