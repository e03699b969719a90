"""The run's workspace: a git repository in which every attempt is one commit.

Layout::

    root/
      task/            the task's files, read-only, hashed at creation
      solution.py      what the model edits (name configurable)
      .gitignore       build outputs and .kagent/ stay out of history
      scratch/         the model's scratch scripts, dumps and notes: committed, never reverted
      .kagent/         kagent's private state (task_hashes.json), never committed

A revert puts back the solution's files only (revert_solution): the solution file and the
files it names. Everything else the model made stays as it is: scratch scripts, dumps, notes.

History on ``main`` stays linear: going back to an earlier attempt restores its tree and
commits that as a new attempt, so nothing is rewritten. Every attempt also gets a ref
``refs/kagent/attempts/<n>`` that is never deleted, so failed attempts stay reachable.
Git runs through its command line (via GitPython, repository.py) with a local identity, no
hooks, no signing and no global excludes, so a workspace behaves the same on every machine.
The task's files are copied in, recorded and checked by task_files.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import git

from kagent.agent.storage.repository import Repository, git_call
from kagent.agent.storage.task_files import (
    TASK_DIR,
    changed_task_files,
    check_task_sources,
    copy_task_in,
    protect_task_files,
    record_task_hashes,
)
from kagent.core.errors import KagentError

SCRATCH_DIR = "scratch"
STATE_DIR = ".kagent"
TASK_HASHES = f"{STATE_DIR}/task_hashes.json"
ATTEMPTS_REF = "refs/kagent/attempts/"
UNCOMMITTED_REF = "refs/kagent/uncommitted/"
ORPHAN_REF = "refs/kagent/orphans/"
PREVIOUS_MAIN_REF = "refs/kagent/previous-main/"
SNAPSHOT_REF = "refs/kagent/snapshot"
BEST_TAG = "best"
GITIGNORE = "build/\n__pycache__/\n*.so\n*.o\n.kagent/\n"

# Written to the repository's own config: it marks the folder as a kagent workspace and
# overrides whatever the machine's global git config says about identity, hooks, signing
# and ignores, any of which could make a commit fail or silently drop the model's files.
_CONFIG = {
    "user.name": "kagent",
    "user.email": "kagent@localhost",
    "commit.gpgsign": "false",
    "tag.gpgsign": "false",
    "core.hooksPath": os.devnull,
    "core.excludesFile": os.devnull,
    "core.autocrlf": "false",
}
_SOLUTION_KEY = "kagent.solution"
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


@dataclass(frozen=True)
class Reverted:
    """What a revert of the solution's files did (paths relative to the workspace)."""

    restored: list[str]  # the solution's files, put back as the attempt had them
    kept: list[str]  # the other files that differ from the attempt, left as they are


class Workspace:
    def __init__(self, repo: git.Repo, solution_name: str):
        """Use create() or open(); this wraps an already-checked repository."""
        self._git = Repository(repo)
        self._root = self._git.root
        self._solution_name = solution_name

    # ----------------------------------------------------------------- making and opening

    @classmethod
    def create(
        cls, root: Path, task_files: list[Path], solution_name: str = "solution.py", starter: str | None = None
    ) -> Workspace:
        """A new workspace at ``root`` (absent or empty) holding the task and the starter solution."""
        root = Path(root).resolve()
        _check_solution_name(solution_name)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise KagentError(
                f"cannot create a workspace at {root}: it exists and is not an empty folder",
                hint="pick a new run folder, or resume the run that is there",
            )
        sources = [Path(p) for p in task_files]
        check_task_sources(sources)

        root.mkdir(parents=True, exist_ok=True)
        repo = git_call(lambda: git.Repo.init(root))
        # Before the first commit HEAD can simply be pointed at main; unlike
        # `git init --initial-branch` this works on every git version.
        repo.git.symbolic_ref("HEAD", "refs/heads/main")
        for key, value in {**_CONFIG, _SOLUTION_KEY: solution_name}.items():
            repo.git.config(key, value)

        copy_task_in(root, sources)
        (root / ".gitignore").write_text(GITIGNORE)
        # The same rules again where the model cannot edit them: were they only in .gitignore,
        # a rewritten .gitignore would let restore() stage, then delete, .kagent/ and builds.
        exclude = Path(repo.git_dir) / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text(GITIGNORE)
        if starter is not None:
            solution = root / solution_name
            solution.parent.mkdir(parents=True, exist_ok=True)
            solution.write_text(starter)

        workspace = cls(repo, solution_name)
        (root / STATE_DIR).mkdir()
        record_task_hashes(root, root / TASK_HASHES)
        protect_task_files(root)
        workspace.mark_attempt(0, workspace.commit("attempt 0: starting point"))
        return workspace

    @classmethod
    def open(cls, root: Path) -> Workspace:
        """The workspace at ``root``; KagentError when the folder is not one."""
        root = Path(root).resolve()
        if not root.is_dir():
            raise KagentError(f"no workspace at {root}: the folder does not exist")
        not_ours = KagentError(f"{root} is not a kagent workspace", hint="point at a run folder that kagent created")
        try:
            # Only root's own .git counts: a folder inside some other repository is not ours.
            repo = git.Repo(root, search_parent_directories=False)
            solution_name = repo.git.config("--local", "--get", _SOLUTION_KEY)
            repo.git.rev_parse("--verify", "--quiet", f"{ATTEMPTS_REF}0^{{commit}}")
        except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError) as error:
            raise not_ours from error
        if repo.bare or Path(repo.working_tree_dir or "").resolve() != root:
            raise not_ours
        return cls(repo, solution_name)

    @property
    def root(self) -> Path:
        return self._root

    @property
    def solution_path(self) -> Path:
        return self._root / self._solution_name

    # ----------------------------------------------------------------------- the task

    def task_files_changed(self) -> list[str]:
        """Task files edited, removed or added since creation (paths relative to root)."""
        return changed_task_files(self._root, self._root / TASK_HASHES)

    def put_back_task_files(self) -> list[str]:
        """Task files edited, removed or added since creation, put back as the task gave them
        (from attempt 0, the starting point): the paths. Where the jail cannot mount task/
        read-only, a command (or one run as root) can still write there."""
        changed = self.task_files_changed()
        if not changed:
            return []
        start = self.attempts()[0]
        given = set(self._git.run("ls-tree", "-r", "--name-only", start, "--", TASK_DIR).splitlines())
        for path in changed:
            if path in given:
                self._git.run("checkout", start, "--", path)
            else:
                (self._root / path).unlink()
        protect_task_files(self._root)
        return changed

    # -------------------------------------------------------------------- commits, refs

    def commit(self, message: str, trailers: dict[str, str] | None = None) -> str:
        """Commits the whole working tree (even when unchanged) and returns the new sha."""
        if not message.strip():
            raise ValueError("a commit needs a message")
        text = message.strip()
        if trailers:
            lines = []
            for key, value in trailers.items():
                if not _TRAILER_KEY.fullmatch(key) or "\n" in value or not value.strip():
                    raise ValueError(f"not a valid git trailer: {key!r}: {value!r}")
                lines.append(f"{key}: {value.strip()}")
            # A blank line first, so the trailers form the message's last paragraph on their own.
            text += "\n\n" + "\n".join(lines)
        self._git.run("add", "-A")
        # cleanup=whitespace: the default would drop lines starting with '#' from the message.
        self._git.run("commit", "--allow-empty", "--no-verify", "--cleanup=whitespace", "-m", text)
        return self.head()

    def trailers(self, sha: str) -> dict[str, str]:
        """The git trailers of a commit ("Key: value" lines of its last paragraph)."""
        out = self._git.run("log", "-1", "--format=%(trailers:only,unfold)", self._git.resolve(sha))
        pairs = (line.split(":", 1) for line in out.splitlines() if ":" in line)
        return {key.strip(): value.strip() for key, value in pairs}

    def mark_attempt(self, number: int, sha: str) -> None:
        """Points refs/kagent/attempts/<number> at ``sha``; an attempt once marked never moves."""
        if number < 0:
            raise ValueError(f"attempt numbers start at 0, got {number}")
        sha = self._git.resolve(sha)
        existing = self.attempts().get(number)
        if existing is not None and existing != sha:
            raise KagentError(f"attempt {number} is already recorded as {existing[:12]} in {self._root}")
        self._git.run("update-ref", f"{ATTEMPTS_REF}{number}", sha)

    def attempts(self) -> dict[int, str]:
        """Attempt number -> commit sha, in attempt order."""
        found = self._git.refs(ATTEMPTS_REF)
        return dict(sorted((int(name), sha) for name, sha in found.items() if name.isdigit()))

    def uncommitted(self) -> dict[str, str]:
        """Name -> sha of work set aside by stash_uncommitted()."""
        return self._git.refs(UNCOMMITTED_REF)

    def tag_best(self, sha: str) -> None:
        self._git.run("tag", "--force", BEST_TAG, self._git.resolve(sha))

    def best(self) -> str | None:
        return self._git.try_resolve(f"refs/tags/{BEST_TAG}")

    def head(self) -> str:
        return self._git.resolve("HEAD")

    def diffs(self, pairs: list[tuple[str, str]]) -> dict[str, str]:
        """The diff from old to new for each (old, new) pair of commits, keyed by new
        (Repository.diffs: one git process for them all)."""
        return self._git.diffs(pairs)

    def files(self, wanted: list[tuple[str, str]]) -> list[bytes | None]:
        """The content of each (commit, path), None where the commit has no file at that path
        (Repository.files: one git process for them all)."""
        return self._git.files(wanted)

    # ---------------------------------------------------------------- the working tree

    def dirty(self) -> bool:
        """True when the working tree (untracked, non-ignored files included) differs from HEAD."""
        return bool(self.changed_files("HEAD"))

    def changed_files(self, base: str) -> list[str]:
        """Paths that differ between ``base`` and the working tree, new files included."""
        base_sha = self._git.resolve(base)
        with self._git.snapshot_index() as env:
            out = self._git.run("diff", "--cached", "--name-only", "--no-renames", "-z", base_sha, env=env)
        return sorted(p for p in out.split("\0") if p)

    def diff(self, base: str, target: str | None = None) -> str:
        """Unified diff from ``base`` to ``target``, or to the working tree (new files included) when None."""
        base_sha = self._git.resolve(base)
        if target is not None:
            return self._git.run("diff", base_sha, self._git.resolve(target), strip=False)
        with self._git.snapshot_index() as env:
            return self._git.run("diff", "--cached", base_sha, env=env, strip=False)

    def restore(self, sha: str, keep: Sequence[str] = ()) -> list[str]:
        """Makes the working tree equal to the tree of ``sha`` and returns the paths it changed.

        Changed files come back, files added since are removed (untracked ones too), ignored
        files such as build outputs stay. The files named in ``keep`` (relative paths) stay as
        they are, where they are (the model's notes outlive a revert). HEAD does not move: the
        caller commits the result.
        """
        target = self._git.resolve(sha)
        kept = {name: (self._root / name).read_bytes() for name in keep if (self._root / name).is_file()}
        # Staging everything first puts new files in the index, so that read-tree -u, which
        # removes whatever the index has and the target lacks, removes them as well.
        self._git.run("add", "-A")
        changed = sorted(
            p for p in self._git.run("diff", "--cached", "--name-only", "--no-renames", "-z", target).split("\0") if p
        )
        self._git.run("read-tree", "--reset", "-u", target)
        for name, content in kept.items():
            (self._root / name).write_bytes(content)
        protect_task_files(self._root)
        return [path for path in changed if path not in kept]

    def revert_solution(self, sha: str, keep: Sequence[str] = ()) -> Reverted:
        """Puts the solution's files back as the commit ``sha`` has them, and nothing else.

        The solution's files are the solution file and the files of ``sha`` that it names, in
        its version there or the current one (a path, a file name, or a module it imports).
        Files made since stay, and so does everything under scratch/ and in ``keep``: scratch
        scripts, dumps and notes are work a failed attempt must not take away. HEAD does not
        move: the caller commits the result.
        """
        target = self._git.resolve(sha)
        in_target = set(self._git.run("ls-tree", "-r", "--name-only", "-z", target).split("\0")) - {""}
        differ = [
            p
            for p in self.changed_files(target)
            if PurePosixPath(p).parts[0] not in (TASK_DIR, SCRATCH_DIR) and p not in keep
        ]
        solution = self._solution_name
        texts = [(self._root / solution).read_text(errors="replace") if (self._root / solution).is_file() else ""]
        old = self.files([(target, solution)])[0]
        texts.append(old.decode(errors="replace") if old is not None else "")
        restored = sorted(p for p in differ if p in in_target and (p == solution or _named_in(p, texts)))
        for path in restored:
            self._git.run("checkout", target, "--", path)
        protect_task_files(self._root)
        return Reverted(restored=restored, kept=sorted(set(differ) - set(restored)))

    def stash_uncommitted(self, name: str) -> str | None:
        """Sets work not yet committed aside on refs/kagent/uncommitted/<name> and cleans the tree.

        Main does not move. Returns the side commit's sha, or None when there was nothing to
        set aside. Used on resume, so that nothing a crashed segment left is thrown away.
        """
        ref = f"{UNCOMMITTED_REF}{name}"
        try:
            self._git.repo.git.check_ref_format(ref)
        except git.GitCommandError as error:
            raise ValueError(f"{name!r} cannot name a git ref") from error
        if self._git.try_resolve(ref) is not None:
            raise KagentError(f"uncommitted work named {name!r} is already set aside in {self._root}")
        if not self.dirty():
            return None
        head = self.head()
        with self._git.snapshot_index() as env:
            tree = self._git.run("write-tree", env=env)
        sha = self._git.run("commit-tree", tree, "-p", head, "-m", f"uncommitted work set aside: {name}")
        # The empty old value makes the update fail rather than overwrite a ref made meanwhile.
        self._git.run("update-ref", ref, sha, "")
        self.restore(head)
        return sha

    def snapshot(self) -> str:
        """A commit of the working tree as it is (untracked files included) on
        refs/kagent/snapshot, without moving main or touching the index: the state after a
        tool call, which a resumed run goes back to."""
        with self._git.snapshot_index() as env:
            tree = self._git.run("write-tree", env=env)
        sha = self._git.run("commit-tree", tree, "-p", self.head(), "-m", "snapshot after a tool call")
        self._git.run("update-ref", SNAPSHOT_REF, sha)
        return sha

    def set_aside_attempts(self, keep: set[int]) -> dict[int, str]:
        """Moves the attempt refs not in ``keep`` to refs/kagent/orphans/<n> (never deleted):
        commits a killed run made for attempts its trace never recorded. An orphan of the same
        number set aside before keeps its ref: the newcomer's name ends with its own sha."""
        moved = {}
        orphans = self._git.refs(ORPHAN_REF)
        for number, sha in self.attempts().items():
            if number not in keep:
                name = str(number) if orphans.get(str(number), sha) == sha else f"{number}-{sha[:12]}"
                self._git.run("update-ref", f"{ORPHAN_REF}{name}", sha)
                self._git.run("update-ref", "-d", f"{ATTEMPTS_REF}{number}")
                moved[number] = sha
        return moved

    def reset_main(self, sha: str, keep_as: str | None = None) -> str | None:
        """Points main at ``sha`` without touching the working tree or the index's files.

        With ``keep_as``, a tip of main that the move would leave behind (not an ancestor of
        ``sha``) is kept first on refs/kagent/previous-main/<keep_as>, whose name is returned:
        no commit loses its last ref. None when nothing was left behind.
        """
        target, old = self._git.resolve(sha), self.head()
        kept = None
        if keep_as is not None and old != target and not self._git.is_ancestor(old, target):
            kept = f"{PREVIOUS_MAIN_REF}{keep_as}"
            self._git.run("update-ref", kept, old, "")  # the empty old value: never overwrite one kept before
        self._git.run("update-ref", "refs/heads/main", target)
        self._git.run("reset", "-q", "--mixed", target)
        return kept


def _named_in(path: str, texts: Sequence[str]) -> bool:
    """Whether a solution's text names the file ``path``: its path or file name, or, for a
    Python module, an import of it."""
    pure = PurePosixPath(path)
    if any(path in text or pure.name in text for text in texts):
        return True
    if pure.suffix != ".py":
        return False
    module = ".".join(pure.with_suffix("").parts)
    imports = re.compile(rf"^\s*(from|import)\s+[\w., ]*\b({re.escape(module)}|{re.escape(pure.stem)})\b", re.MULTILINE)
    return any(imports.search(text) for text in texts)


def _check_solution_name(name: str) -> None:
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or ".." in path.parts
        or path.parts[0] in (TASK_DIR, STATE_DIR, ".git", ".gitignore")
    ):
        raise KagentError(f"the solution file must be a path inside the workspace, outside task/; got '{name}'")
