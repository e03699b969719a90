"""Where a kernel's warps wait, by source line: Nsight Compute's warp-state samples per SASS
instruction (its source page), joined to the lines of the kernel's source through the line
table of the very binary that ran (``nvdisasm -g``).

Why not Nsight Compute's own CUDA source view: on a Triton kernel it printed the file's lines
without their metrics (H200), and a kernel built elsewhere has no source file it
could open. The SASS page always has the samples, and the binary always has the line table
(Triton compiles with line info; the tool builds .cu files with -lineinfo).

Which binary: the page has no file name, so the candidates (the cubins of Triton's cache, the
device code of a built program or library) are each disassembled, and the one whose
instructions, at the page's offsets from the kernel's first instruction, are the page's own
instructions is the one that ran. Nothing is assumed: where no candidate agrees, the samples
are shown by SASS instruction only, and the reason is said.

For a Triton kernel the line table alone names the innermost line: tl.sum's body in Triton's
library, or a helper's line whichever stage called it. Triton's PTX says where each instruction
was inlined from (call_chains), so those count at the kernel's own lines, and a second table
sums inlined work by the line of the kernel's body that called it.

Parsing and tables here; the ncu_kernel tool (ncu.py) runs the commands.
"""

from __future__ import annotations

import csv
import io
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

# The source page's columns (Nsight Compute 2023-2025): the instruction's address and text,
# and the samples of warps found at it, all of them and those that could not issue.
SAMPLES = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"
ADDRESS_HEADERS = ("Address", "# Address")
# Some versions add a column per stall reason (stall_barrier, stall_long_sb, ...): shown per
# line where they are present.
_REASON_PREFIX = "stall_"
# How many of a candidate function's instructions must agree with the page's for it to be the
# binary that ran (the rest: a version that prints an instruction otherwise).
MIN_AGREEMENT = 0.95
TOP_LINES = 15
TOP_INSTRUCTIONS = 10

# nvdisasm -g: a function's label line, a line-table comment, an instruction with its offset.
_FUNCTION = re.compile(r"^\.text\.(\S+):\s*$")
_LINE_INFO = re.compile(r'//## File "(.+?)", line (\d+)')
_INSTRUCTION = re.compile(r"/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;?\s*$")


def opcode(text: str) -> str:
    """An instruction's mnemonic without its predicate or modifiers: ``@!P0 LDG.E.128 R4, ...``
    -> ``LDG``."""
    words = text.replace("{", " ").split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0].upper() if words else ""


@dataclass
class SassRow:
    """One instruction of Nsight Compute's source page."""

    address: int
    text: str
    samples: float
    not_issued: float
    reasons: dict[str, float] = field(default_factory=dict)


def _number(cell: Optional[str]) -> float:
    try:
        return float((cell or "").replace(",", "").strip() or 0)
    except ValueError:
        return 0.0


def _address(cell: str) -> int:
    """An instruction's address as the page prints it: hexadecimal (0x...), else decimal."""
    text = cell.strip().lower()
    return int(text, 16) if text.startswith("0x") or any(c in "abcdef" for c in text) else int(text)


def parse_source_page(text: str) -> list[list[SassRow]]:
    """``ncu --page source --print-source sass --csv`` output as one list of instructions per
    profiled launch (each launch's table starts with its own header row), in address order.
    Lines that are not rows of a table (ncu's ``==PROF==`` lines, a kernel's title) are skipped."""
    blocks: list[list[SassRow]] = []
    columns: Optional[dict[str, int]] = None
    width = 0
    for row in csv.reader(io.StringIO(text)):
        cells = [c.strip() for c in row]
        address_header = next((h for h in ADDRESS_HEADERS if h in cells), None)
        if address_header and "Source" in cells:
            columns, width = {name: i for i, name in enumerate(cells)}, len(cells)
            columns["Address"] = columns[address_header]
            blocks.append([])
            continue
        if columns is None or len(cells) < width:
            continue
        try:
            address = _address(cells[columns["Address"]])
        except ValueError:
            continue
        reasons = {
            name[len(_REASON_PREFIX) :]: _number(cells[i])
            for name, i in columns.items()
            if name.startswith(_REASON_PREFIX)
        }
        blocks[-1].append(
            SassRow(
                address,
                cells[columns["Source"]],
                _number(cells[columns[SAMPLES]]) if SAMPLES in columns else 0.0,
                _number(cells[columns[NOT_ISSUED]]) if NOT_ISSUED in columns else 0.0,
                reasons,
            )
        )
    return [sorted(block, key=lambda r: r.address) for block in blocks if block]


Chain = tuple[tuple[str, int], ...]  # (file, line) frames an instruction was inlined from, innermost first


@dataclass
class Instruction:
    """One instruction of a disassembled function, with the source line the line table gives
    it, and where known (call_chains) the lines it was inlined from, innermost first."""

    offset: int
    text: str
    file: Optional[str]
    line: Optional[int]
    chain: Chain = ()


def parse_disassembly(listing: str) -> dict[str, list[Instruction]]:
    """``nvdisasm -g -c`` output: each function's instructions by offset, each with the file and
    line of the last line-table comment before it (None before the first)."""
    functions: dict[str, list[Instruction]] = {}
    current: Optional[list[Instruction]] = None
    where: tuple[Optional[str], Optional[int]] = (None, None)
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            current = functions.setdefault(m.group(1), [])
            where = (None, None)
        elif m := _LINE_INFO.search(line):
            where = (m.group(1), int(m.group(2)))
        elif current is not None and (m := _INSTRUCTION.search(line)):
            current.append(Instruction(int(m.group(1), 16), m.group(2), *where))
    return functions


# -- the lines a Triton kernel's instructions were inlined from --------------------------------
# The cubin's line table holds the innermost line only: a line of tl.sum in Triton's own
# library, or of a helper that every stage calls. Triton's PTX (kept beside the cubin in its
# cache) says where each instruction was inlined from, in the comment of its .loc directive
# ("standard.py:293:36 @[ kernel.py:359:18 @[ kernel.py:726:71 ] ]"); the cubin carries that PTX
# without comments or .loc lines (section .nv_debug_ptx_txt, a line per NUL), and nvdisasm -gp
# gives each instruction's line in it. The two are aligned line by line.
PTX_SECTION = ".nv_debug_ptx_txt"
_FRAME = re.compile(r"([^\s@\[\]:]+):(\d+):\d+")
_FILE_DIRECTIVE = re.compile(r'^\s*\.file\s+\d+\s+"([^"]+)"')
# How far ahead in Triton's PTX a line of the cubin's copy is looked for before it is given up.
_ALIGN_WINDOW = 400


def elf_section(data: bytes, name: str) -> Optional[bytes]:
    """The bytes of section ``name`` of a 64-bit little-endian ELF file (a cubin), if any; None
    for anything else, a malformed file included (the model's code built it)."""
    if data[:6] != b"\x7fELF\x02\x01":
        return None
    try:
        (offset,) = struct.unpack_from("<Q", data, 0x28)
        size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)

        def header(i: int) -> tuple:
            return struct.unpack_from("<IIQQQQIIQQ", data, offset + i * size)

        names = header(names_index)
        table = data[names[4] : names[4] + names[5]]
        for i in range(count):
            entry = header(i)
            if table[entry[0] : table.index(b"\0", entry[0])].decode(errors="replace") == name:
                return data[entry[4] : entry[4] + entry[5]]
    except (struct.error, ValueError):
        return None
    return None


def _ptx_key(line: str) -> str:
    return " ".join(line.split("//", 1)[0].split())


def call_chains(embedded: bytes, ptx: str) -> dict[int, Chain]:
    """For each line of the cubin's PTX copy (1-based, as nvdisasm -gp counts them), the chain of
    the .loc before its line in Triton's PTX ``ptx``: (file, line) from the innermost frame out,
    files by their full paths where the .file directives name them."""
    source = ptx.splitlines()
    paths: dict[str, str] = {}
    for text in source:
        if m := _FILE_DIRECTIVE.match(text):
            paths.setdefault(Path(m.group(1)).name, m.group(1))
    chains: dict[int, Chain] = {}
    at = 0
    chain: Chain = ()
    for number, line in enumerate(embedded.decode(errors="replace").split("\0"), 1):
        key = _ptx_key(line)
        if not key:
            continue
        for ahead in range(at, min(len(source), at + _ALIGN_WINDOW)):
            text = source[ahead].strip()
            if text.startswith(".loc") and "//" in text:
                found = tuple((paths.get(f, f), int(n)) for f, n in _FRAME.findall(text.split("//", 1)[1]))
                chain = found if found and found[0][1] else ()
            elif _ptx_key(text) == key:
                chains[number], at = chain, ahead + 1
                break
    return chains


def attach_chains(match: Match, ptx_listing: str, chains: dict[int, Chain]) -> int:
    """Give each instruction of the matched function the chain of its PTX line (``nvdisasm -gp``
    output of its binary); how many got one."""
    ptx_line = {i.offset: i.line for i in parse_disassembly(ptx_listing).get(match.function, [])}
    instructions = match.instructions
    attached = 0
    for instruction in instructions:
        chain = chains.get(ptx_line.get(instruction.offset) or 0, ())
        if chain:
            instruction.chain = chain
            attached += 1
    return attached


def inline_chains(match: Match, cubin: bytes, ptx: str, ptx_listing: str) -> int:
    """The whole join for the matched function of ``cubin``: Triton's PTX ``ptx`` and the
    ``nvdisasm -gp`` listing of the cubin; how many instructions got a chain (0 where the cubin
    carries no copy of its PTX)."""
    embedded = elf_section(cubin, PTX_SECTION)
    return attach_chains(match, ptx_listing, call_chains(embedded, ptx)) if embedded is not None else 0


def _in_triton(path: str) -> bool:
    """Whether a frame lies in Triton's own library (tl.sum, tl.max...): a call site of the
    kernel's own code says more."""
    parts = Path(path).parts
    return "triton" in parts and "language" in parts


def agreement(rows: list[SassRow], instructions: list[Instruction]) -> float:
    """The share of the page's instructions that the function has, with the same mnemonic, at
    the same offset from its first instruction."""
    if not rows or not instructions:
        return 0.0
    at = {i.offset: opcode(i.text) for i in instructions}
    base = rows[0].address
    return sum(at.get(r.address - base) == opcode(r.text) for r in rows) / len(rows)


@dataclass
class Match:
    """The function of a binary that ran, and how well it agreed with the page."""

    binary: Path
    function: str
    instructions: list[Instruction]
    agreement: float


def best_match(rows: list[SassRow], listings: Iterable[tuple[Path, str]]) -> Optional[Match]:
    """Among the functions of the disassembled binaries (path, nvdisasm listing), the one whose
    instructions are the page's, if any agrees well enough (MIN_AGREEMENT); the first of equals."""
    best: Optional[Match] = None
    for binary, listing in listings:
        for name, instructions in parse_disassembly(listing).items():
            # The page cannot hold more instructions than the function (it may hold fewer,
            # should a version leave out the padding after the last one).
            if len(instructions) < len(rows) * MIN_AGREEMENT:
                continue
            share = agreement(rows, instructions)
            # Of equal agreement, the function whose length is the page's.
            if share >= MIN_AGREEMENT and (
                best is None
                or (share, -abs(len(instructions) - len(rows)))
                > (best.agreement, -abs(len(best.instructions) - len(rows)))
            ):
                best = Match(binary, name, instructions, share)
        if best is not None and best.agreement == 1.0:
            break
    return best


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def _source_text(file: str, line: int, readable: Sequence[Path], cache: dict[str, Optional[list[str]]]) -> str:
    """The text of ``file``'s ``line``, where the file lies in one of the ``readable`` folders.
    Nothing else is opened: the line table comes from a binary the model's code built, and it
    may name any file of this machine, which the model's commands cannot read."""
    if file not in cache:
        path = Path(file).resolve()
        try:
            cache[file] = (
                path.read_text(errors="replace").splitlines()
                if any(path.is_relative_to(folder.resolve()) for folder in readable)
                else None
            )
        except OSError:  # gone, or not a file
            cache[file] = None
    lines = cache[file]
    return lines[line - 1].strip()[:100] if lines and 0 < line <= len(lines) else ""


def _top_reasons(reasons: dict[str, float], total: float) -> str:
    picked = sorted(((v, k) for k, v in reasons.items() if v > 0), reverse=True)[:3]
    return ", ".join(f"{k} {100 * v / total:.0f}%" for v, k in picked) if total and picked else ""


@dataclass
class LineSums:
    """The samples of the instructions of one source line."""

    samples: float = 0.0
    not_issued: float = 0.0
    instructions: int = 0
    reasons: dict[str, float] = field(default_factory=dict)

    def add(self, row: SassRow) -> None:
        self.samples += row.samples
        self.not_issued += row.not_issued
        self.instructions += 1
        for reason, count in row.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0.0) + count


Where = tuple[Optional[str], Optional[int]]  # (file, line) of an instruction; (None, None): unknown


def own_line(i: Instruction) -> Where:
    """An instruction's line: the innermost frame outside Triton's library where its chain is
    known, else the line table's."""
    own = next((frame for frame in i.chain if not _in_triton(frame[0])), None)
    return own if own else (i.file, i.line)


def _instructions_at(rows: list[SassRow], match: Match) -> dict[int, Optional[Instruction]]:
    """The matched function's instruction at each of the page's addresses."""
    by_offset = {i.offset: i for i in match.instructions}
    return {r.address: by_offset.get(r.address - rows[0].address) for r in rows}


def lines_of(rows: list[SassRow], match: Match) -> dict[int, Where]:
    """The source line of each of the page's instructions (by address), from the matched function."""
    return {address: own_line(i) if i else (None, None) for address, i in _instructions_at(rows, match).items()}


def callers_of(rows: list[SassRow], match: Match) -> dict[int, Where]:
    """For each of the page's instructions inlined from a helper, the line of the kernel's own
    body it was called from (the outermost frame); the others are left out."""
    return {
        address: i.chain[-1]
        for address, i in _instructions_at(rows, match).items()
        if i is not None and len(i.chain) > 1
    }


def by_line_text(
    rows: list[SassRow],
    match: Optional[Match],
    saved_as: str,
    why_unmapped: str = "",
    shown_path: Callable[[Path], str] = str,
    readable: Sequence[Path] = (),
) -> str:
    """What the model reads: the samples by source line (where a binary matched, else why
    not), then the SASS instructions with the most samples, each with its line; a line's text
    where its file lies in ``readable``."""
    total = sum(r.samples for r in rows)
    lines = [
        f"Warp-state samples: {total:,.0f} over {len(rows):,} SASS instructions (the whole page is in {saved_as})."
    ]
    if total == 0:
        lines.append("No samples: the launch was too short to sample, or the section set lacks SourceCounters.")
        return "\n".join(lines)
    where: dict[int, Where] = {}
    if match is None:
        lines.append(f"Not mapped to source lines: {why_unmapped}")
    else:
        where = lines_of(rows, match)
        lines.append(
            f"Mapped to source lines with nvdisasm -g of {shown_path(match.binary)} (function "
            f"{match.function}; {100 * match.agreement:.1f}% of the instructions agree)."
        )
        lines += _line_table(rows, where, total, readable)
        callers = callers_of(rows, match)
        if callers:
            lines.append("By the line of the kernel's body each helper's work was called from (inlined code only):")
            lines += _line_table([r for r in rows if r.address in callers], callers, total, readable)
    lines.append("SASS instructions with the most samples (offset from the kernel's first):")
    base = rows[0].address
    for r in sorted(rows, key=lambda r: -r.samples)[:TOP_INSTRUCTIONS]:
        file, line = where.get(r.address, (None, None))
        at = f"  {Path(file).name}:{line}" if file else ""
        lines.append(f"{_share(r.samples, total)}  /*{r.address - base:04x}*/  {r.text[:70]}{at}")
    return "\n".join(lines)


def _line_table(rows: list[SassRow], where: dict[int, Where], total: float, readable: Sequence[Path]) -> list[str]:
    """The TOP_LINES source lines with the most samples, each with its text where its file lies
    in ``readable``, and the stall reasons where the page has a column per reason."""
    sums: dict[Where, LineSums] = {}
    for r in rows:
        sums.setdefault(where[r.address], LineSums()).add(r)
    ranked = sorted(sums.items(), key=lambda item: -item[1].samples)
    texts: dict[str, Optional[list[str]]] = {}
    table = ["share  samples  not issued  instrs  line"]
    for (file, line), entry in ranked[:TOP_LINES]:
        at = f"{Path(file).name}:{line}" if file else "(no line)"
        code = _source_text(file, line, readable, texts) if file and line else ""
        reasons = _top_reasons(entry.reasons, entry.samples)
        table.append(
            f"{_share(entry.samples, total)}  {entry.samples:7,.0f}  {_share(entry.not_issued, entry.samples)}"
            f"  {entry.instructions:6d}  {at}  {code}" + (f"  [{reasons}]" if reasons else "")
        )
    rest = sum(entry.samples for _, entry in ranked[TOP_LINES:])
    if rest:
        table.append(f"{_share(rest, total)}  in the other {len(ranked) - TOP_LINES} lines")
    return table
