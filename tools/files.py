"""Reading, listing, writing and editing files of the workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field, ValidationError

from kagent.tools.base import (
    UNTOUCHED,
    Args,
    BaseTool,
    FileEffect,
    Rewrite,
    ToolContext,
    ToolError,
    ToolFacts,
    ToolOutcome,
    relative_name,
    resolve_in_workspace,
    understood,
)

# Folders a listing skips: history, caches and build products are noise to the model.
SKIPPED_DIRS = {
    ".git",
    "__pycache__",
    "build",
    "dist",
    ".ipynb_checkpoints",
    ".pytest_cache",
    "torch_extensions",
    ".triton",
    "node_modules",
    ".venv",
}
MAX_LIST_ENTRIES = 500
# Past this a file is read in slices by the shell (head, sed -n), not loaded whole.
MAX_READ_BYTES = 16 << 20


def _read_text(path: Path, shown: str) -> str:
    if not path.exists():
        raise ToolError(f"no file {shown}")
    if path.is_dir():
        raise ToolError(f"{shown} is a folder; use list_files to see what it holds")
    if path.stat().st_size > MAX_READ_BYTES:
        raise ToolError(f"{shown} is larger than {MAX_READ_BYTES >> 20} MiB: look at parts of it with the shell")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not UTF-8 text (a binary file?)") from None
    except OSError as err:  # permissions the model changed, say
        raise ToolError(f"cannot read {shown}: {err.strerror}") from None


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def _write_text(path: Path, shown: str, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:  # a parent that is a file, a read-only file the model made...
        raise ToolError(f"cannot write {shown}: {err.strerror or err}") from None


class ReadFileArgs(Args):
    path: str = Field(description="File path, relative to the workspace")
    offset_line: int = Field(1, ge=1, description="First line to show (1-based)")
    max_lines: int = Field(400, ge=1, le=5000, description="How many lines to show at most")


# Room kept under the output cap for the note that says where to read on.
_NOTE_ROOM = 160


def line_page(lines: list[str], first: int, max_lines: int, budget: int) -> tuple[list[str], bool]:
    """Numbered whole lines from ``first`` (1-based): at most ``max_lines`` of them and at most
    ``budget`` characters in all, so that the output cap never cuts a page in its middle. A
    single line longer than the budget is shown cut, marked as such; it is the page alone.
    Returns the page's rows and whether its last line was cut."""
    width = len(str(len(lines)))  # one width for the whole file, so pages line up
    rows: list[str] = []
    used = 0
    for number in range(first, min(len(lines), first - 1 + max_lines) + 1):
        row = f"{number:>{width}}| {lines[number - 1]}"
        if used + len(row) + 1 > budget:
            if rows:
                break
            keep = max(budget - 80, 0)  # the marker below is shorter than 80 characters
            return [f"{row[:keep]} [… line {number} cut: {len(row) - keep:,} more characters]"], True
        rows.append(row)
        used += len(row) + 1
    return rows, False


class ReadFile(BaseTool):
    name = "read_file"
    description = (
        "Read a text file of the workspace, with line numbers, in pages of whole lines (as many as "
        "fit the output cap, up to max_lines). Each page ends by saying which offset_line reads on. "
        "The task's files are under task/."
    )
    Arguments = ReadFileArgs

    def execute(self, args: ReadFileArgs, ctx: ToolContext) -> ToolOutcome:
        path = resolve_in_workspace(ctx, args.path)
        shown = relative_name(ctx, path)
        lines = _read_text(path, shown).splitlines()
        if args.offset_line > len(lines) and lines:
            raise ToolError(f"{shown} has only {len(lines)} lines; offset_line {args.offset_line} is past its end")
        rows, cut = line_page(lines, args.offset_line, args.max_lines, ctx.max_output_chars - _NOTE_ROOM)
        end = args.offset_line - 1 + len(rows)
        body = "\n".join(rows)
        note = ""
        if end < len(lines):
            why = (
                "that line is longer than the output cap; look at it with the shell (cut -c)"
                if cut
                else "the page was full"
                if len(rows) < args.max_lines
                else f"max_lines={args.max_lines}"
            )
            note = f"\n[lines {args.offset_line}–{end} of {len(lines)} ({why}); read on with offset_line={end + 1}]"
        elif cut:
            note = "\n[the last line is longer than the output cap; look at it with the shell (cut -c)]"
        return ToolOutcome(
            content=(body or f"{shown} is empty") + note,
            data={"path": shown, "lines": len(lines), "first": args.offset_line, "last": end},
        )


class ListFilesArgs(Args):
    path: str = Field(".", description="Folder, relative to the workspace")
    depth: int = Field(2, ge=1, le=6, description="How many folder levels to descend")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class ListFiles(BaseTool):
    name = "list_files"
    description = (
        "List the files of a workspace folder as a tree with sizes (skips .git, __pycache__ and build folders)."
    )
    Arguments = ListFilesArgs

    def execute(self, args: ListFilesArgs, ctx: ToolContext) -> ToolOutcome:
        root = resolve_in_workspace(ctx, args.path)
        shown = relative_name(ctx, root)
        if not root.is_dir():
            raise ToolError(f"{shown} is not a folder" if root.exists() else f"no folder {shown}")
        lines: list[str] = [f"{shown}/"]
        count = 0

        def walk(folder: Path, level: int) -> None:
            nonlocal count
            try:
                entries = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
            except OSError as err:
                lines.append(f"{'  ' * level}[cannot list: {err.strerror}]")
                return
            for entry in entries:
                if count >= MAX_LIST_ENTRIES:
                    return
                indent = "  " * level
                if entry.is_dir() and not entry.is_symlink():
                    if entry.name in SKIPPED_DIRS:
                        continue
                    count += 1
                    lines.append(f"{indent}{entry.name}/")
                    if level < args.depth:
                        walk(entry, level + 1)
                else:
                    count += 1
                    size = entry.stat().st_size if entry.exists() else 0
                    lines.append(f"{indent}{entry.name}  ({_size(size)})")

        walk(root, 1)
        if count >= MAX_LIST_ENTRIES:
            lines.append(f"[stopped at {MAX_LIST_ENTRIES} entries: list a subfolder]")
        return ToolOutcome(content="\n".join(lines), data={"path": shown, "entries": count})


class WriteFileArgs(Args):
    path: str = Field(description="File path, relative to the workspace (not under task/)")
    content: str = Field(description="The whole new content of the file, or the part to append")
    append: bool = Field(
        False,
        description="Add content at the end of the file instead of replacing it: "
        "how a file too large for one answer is written, in parts",
    )


class WriteFile(BaseTool):
    name = "write_file"
    description = (
        "Create or overwrite a file of the workspace (parent folders are created), or with append=true "
        "add to its end: write a large file in parts, one call each."
    )
    Arguments = WriteFileArgs
    facts = ToolFacts(changes_files=True)

    def file_change(self, args: dict) -> FileEffect:
        try:
            given = WriteFileArgs.model_validate(understood(WriteFileArgs, args)[0])
        except ValidationError:
            return UNTOUCHED  # such a call fails, changing nothing
        if given.append:  # the rest of the file is as it was: known only if it was known before
            return Rewrite(
                given.path,
                after=lambda before: None if before is None else before + given.content,
                note=f" (appending {_line_count(given.content):,} lines)",
                excerpt=("", given.content),
            )
        return Rewrite(given.path, after=lambda _before: given.content, note=f" ({_line_count(given.content):,} lines)")

    def execute(self, args: WriteFileArgs, ctx: ToolContext) -> ToolOutcome:
        path = resolve_in_workspace(ctx, args.path, for_writing=True)
        shown = relative_name(ctx, path)
        if path.is_dir():
            raise ToolError(f"{shown} is a folder")
        existed = path.exists()
        text = _read_text(path, shown) + args.content if args.append and existed else args.content
        _write_text(path, shown, text)
        lines = _line_count(text)
        verb = "appended to" if args.append and existed else "overwrote" if existed else "created"
        added = f"{len(args.content.encode())} bytes added; now " if args.append and existed else ""
        return ToolOutcome(
            content=f"{verb} {shown} ({added}{lines} lines, {len(text.encode())} bytes)",
            data={
                "path": shown,
                "created": not existed,
                "bytes": len(text.encode()),
                "appended": bool(args.append and existed),
            },
        )


class EditFileArgs(Args):
    path: str = Field(description="File path, relative to the workspace (not under task/)")
    old: str = Field(min_length=1, description="Exact text to replace, whitespace included")
    new: str = Field(description="Replacement text")
    expect_count: int = Field(1, ge=1, description="How many times `old` must occur; all are replaced")


class EditFile(BaseTool):
    name = "edit_file"
    description = (
        "Replace an exact string in a file. Fails, changing nothing, unless `old` occurs exactly "
        "expect_count times: include enough surrounding lines to make it unique."
    )
    Arguments = EditFileArgs
    facts = ToolFacts(changes_files=True)

    def file_change(self, args: dict) -> FileEffect:
        try:
            given = EditFileArgs.model_validate(understood(EditFileArgs, args)[0])
        except ValidationError:
            return UNTOUCHED

        def after(before: Optional[str]) -> Optional[str]:
            # As execute: the edit applies only where `old` occurs exactly expect_count times.
            if before is None or before.count(given.old) != given.expect_count:
                return None
            return before.replace(given.old, given.new)

        return Rewrite(given.path, after=after, excerpt=(given.old, given.new))

    def execute(self, args: EditFileArgs, ctx: ToolContext) -> ToolOutcome:
        path = resolve_in_workspace(ctx, args.path, for_writing=True)
        shown = relative_name(ctx, path)
        text = _read_text(path, shown)
        found = text.count(args.old)
        if found != args.expect_count:
            if found == 0:
                raise ToolError(
                    f"`old` does not occur in {shown}; nothing changed (read the file again: "
                    "whitespace and indentation must match exactly)"
                )
            raise ToolError(
                f"`old` occurs {found} times in {shown}, expected {args.expect_count}; nothing "
                "changed (add surrounding lines to make it unique, or set expect_count)"
            )
        _write_text(path, shown, text.replace(args.old, args.new))
        line = text[: text.index(args.old)].count("\n") + 1
        return ToolOutcome(
            content=f"replaced {found} occurrence{'s' if found > 1 else ''} in {shown} (first at line {line})",
            data={"path": shown, "replacements": found, "first_line": line},
        )
