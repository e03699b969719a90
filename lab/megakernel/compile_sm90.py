"""The megakernel compiled for the H200 (sm_90a) on any machine, no GPU needed: a variant's
registers, spills and shared memory from ptxas, at full scale with the GPU's tiles and 132
programs, before a device call is spent on it. Variants as tune.py takes them (warps, a
register cap, any of the layout's constants, another copy of megakernel.py by its path).

    python lab/megakernel/compile_sm90.py --variant '{"name": "split", "consts": {"SPLIT_F": 1}}'

    python lab/megakernel/compile_sm90.py --loops _mla_attend

Each variant's local-memory instructions (spills) are counted by source line, from the cubin's
line table; ``--loops FUNCTION`` adds the compiled loops that run a function's code, each with
its instructions a pass and their opcodes (what one 32-row block of the attention issues). The
argument types come from a model's own launch arguments (a smoke-scale model on this machine:
the same dtypes), pointers taken as 16-byte aligned as on the GPU. The kernel here
on 2026-12-05, before its switches: 255 registers, a 312-byte stack frame, which is the 78
words a thread that the H200's driver reported for it (the lab notebook (lab/notebook/)); on 2026-12-06, with
the switches on and the cache copy out of the attention: 255 registers, a 64-byte stack frame
(16 bytes of spill stores), 147,456 bytes of shared memory.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

# Compiled, not interpreted: megakernel.py turns the interpreter on where no GPU is seen,
# unless this says otherwise.
os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402
from kagent.tools.kernel_reports import find_cuda_tool  # noqa: E402
from kagent.tools import ncu_source  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench  # noqa: E402  (it puts the task on the path)
import megakernel  # noqa: E402
import reference  # noqa: E402
import shapes  # noqa: E402
import solution  # noqa: E402
import tune  # noqa: E402

H200_PROGRAMS = 132
TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.int32: "i32", torch.int64: "i64"}


def signature(variant: dict) -> tuple[dict, dict, dict]:
    """The kernel's (signature, constexprs, attributes) for ``variant`` at full scale on the
    H200: types from a smoke-scale model's launch arguments, constants from the full-scale
    layout with the variant's changes, every pointer 16-byte aligned."""
    # The smoke-scale model with the layout as built: a variant's constants need not fit its
    # matrices (SPLIT_SH=3 does not divide its 2 groups), and the argument types do not change.
    solution.Layout.of = staticmethod(tune.LAYOUT_OF)
    smoke = reference.build_config(shapes.SMOKE_SHAPES[0])
    model = bench.random_model(smoke, torch.device("cpu"))
    context = shapes.SMOKE_SHAPES[0]["context_len"]
    state = reference.init_state(smoke, context, 0)
    args, _, _ = model.kernel_args(reference.init_token(smoke, 0), state)
    tune.apply(variant)
    full = reference.build_config(shapes.SHAPES[0])
    consts = dict(solution.Layout.of(full, H200_PROGRAMS, True).consts, USE_BARRIER=True, STAMPS=True)
    names = list(inspect.signature(tune.kernel_of(variant).fn).parameters)
    runtime = [n for n in names if n not in consts]
    assert len(runtime) == len(args), (len(runtime), len(args))
    types, attrs = {}, {}
    for i, (name, value) in enumerate(zip(runtime, args, strict=True)):
        if isinstance(value, torch.Tensor):
            types[name] = "*" + TYPES[value.dtype]
            attrs[(names.index(name),)] = [["tt.divisibility", 16]]
        else:
            types[name] = "i32"
    sig = {n: types.get(n, "constexpr") for n in names}
    return sig, {n: consts[n] for n in names if n in consts}, attrs


def compile_variant(variant: dict, loops: Sequence[str] = ()) -> dict:
    sig, constexprs, attrs = signature(variant)
    options = {"num_warps": variant.get("num_warps", solution.NUM_WARPS)}
    if variant.get("maxnreg"):
        options["maxnreg"] = variant["maxnreg"]
    started = time.monotonic()
    source = tune.kernel_of(variant)  # this folder's kernel, or the copy the variant names
    kernel = triton.compile(ASTSource(fn=source, signature=sig, constexprs=constexprs, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32), options=options)
    seconds = time.monotonic() - started
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(kernel.asm["ptx"])
        report = subprocess.run([str(ptxas), "-v", "-arch=sm_90a", "-o", os.devnull, str(ptx)],
                                capture_output=True, text=True, check=True).stderr
    code = disassembled(kernel.asm["cubin"], kernel.asm["ptx"])
    row = {"variant": variant, "compile_s": round(seconds, 1), "shared_bytes": kernel.metadata.shared,
           "ptxas": [line.strip() for line in report.splitlines() if "registers" in line or "spill" in line],
           "acq_rel_atomics": kernel.asm["ptx"].count("atom.global.gpu.acq_rel"),
           "spills_by_line": spills_by_line(code)}
    if loops:
        row["loops"] = {function: loops_of(code, source.fn.__globals__.get(function)) for function in loops}
    return row


# A cubin disassembled: its listing (``nvdisasm -g``) and each function's instructions.
Disassembly = tuple[str, dict[str, list[ncu_source.Instruction]]]


def disassembled(cubin: bytes, ptx: str) -> Optional[Disassembly]:
    """The cubin's listing and each function's instructions, every one with the lines it was
    inlined from; None where there is no nvdisasm."""
    nvdisasm = find_cuda_tool("nvdisasm", None)
    if nvdisasm is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        listings = [subprocess.run([nvdisasm, flag, "-c", str(path)], capture_output=True, text=True,
                                   check=True).stdout for flag in ("-g", "-gp")]
        functions = ncu_source.parse_disassembly(listings[0])
        for name, instructions in functions.items():
            ncu_source.inline_chains(ncu_source.Match(path, name, instructions, 1.0), cubin, ptx, listings[1])
    return listings[0], functions


def spills_by_line(code: Optional[Disassembly], top: int = 12) -> list[str]:
    """The source lines whose code reads or writes local memory (LDL, STL: the spills), most
    instructions first, each at the kernel's own line that it was inlined from (tl.sum's body
    counts where tl.sum was called), as the ncu_kernel tool's source view reads them. Static
    counts: an instruction in a loop runs many times."""
    if code is None:
        return ["nvdisasm not found"]
    counts: Counter = Counter()
    for i in (i for instructions in code[1].values() for i in instructions):
        if ncu_source.opcode(i.text) in ("LDL", "STL"):
            file, line = ncu_source.own_line(i)
            counts[(Path(file).name if file else "?", line, ncu_source.opcode(i.text))] += 1
    return [f"{n} {op} {file}:{line}" for (file, line, op), n in counts.most_common(top)]


_SECTION = re.compile(r"^\.text\.(\S+):\s*$")  # a function's code begins (as ncu_source reads it)
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_OFFSET = re.compile(r"/\*([0-9a-fA-F]+)\*/")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def loops_of(code: Optional[Disassembly], function) -> list[dict]:
    """The loops of the compiled kernel that run ``function``'s code (a jit function of the
    kernel's module; a loop is the span from a label to a branch back to it, and counts
    where most of its instructions were inlined from that function's lines): each one's
    instructions a pass, per warp, and how many of each opcode, most first. Static: what one pass
    of the body issues, e.g. a 32-row block of the attention."""
    if code is None:
        return [{"error": "nvdisasm not found"}]
    if not hasattr(function, "fn"):
        return [{"error": "no such jit function in this variant's kernel module"}]
    listing, functions = code
    source, first = inspect.getsourcelines(function.fn)
    lines = range(first, first + len(source))
    module_file = Path(inspect.getsourcefile(function.fn) or "megakernel.py").name
    labels: dict[tuple[str, str], int] = {}  # (compiled function, label): its offset
    current, waiting = "", []
    for text in listing.splitlines():
        if section := _SECTION.match(text):
            current, waiting = section.group(1), []
        if label := _LABEL.match(text):
            waiting.append(label.group(1))
        if waiting and (offset := _OFFSET.search(text)):
            labels.update(((current, name), int(offset.group(1), 16)) for name in waiting)
            waiting = []

    def inside(i: ncu_source.Instruction) -> bool:
        return any(file and Path(file).name == module_file and line in lines
                   for file, line in (*i.chain, (i.file, i.line)))

    loops = []
    for compiled, instructions in functions.items():
        for branch in instructions:
            target = _BRANCH_TARGET.search(branch.text)
            start = labels.get((compiled, target.group(1))) if target else None
            if start is None or start >= branch.offset:
                continue
            body = [i for i in instructions if start <= i.offset <= branch.offset]
            share = sum(inside(i) for i in body) / len(body)
            if share >= 0.5:
                opcodes = Counter(ncu_source.opcode(i.text) for i in body)
                loops.append({"in": compiled, "from": hex(start), "to": hex(branch.offset), "instructions": len(body),
                              "of_the_function": round(share, 3), "opcodes": dict(opcodes.most_common())})
    return sorted(loops, key=lambda loop: loop["instructions"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", default=[], help="JSON: name, num_warps, maxnreg, consts")
    ap.add_argument("--loops", action="append", default=[], metavar="FUNCTION",
                    help="a function of megakernel.py (e.g. _mla_attend): the compiled loops that run its code, "
                         "each with its instructions a pass and their opcodes")
    args = ap.parse_args()
    unknown = [name for name in args.loops if not hasattr(getattr(megakernel, name, None), "fn")]
    if unknown:
        raise SystemExit(f"compile_sm90.py: no jit function {unknown} in megakernel.py")
    try:
        variants = [json.loads(text) for text in args.variant or ['{"name": "now"}']]
    except json.JSONDecodeError as err:
        raise SystemExit(f"compile_sm90.py: a --variant is not JSON: {err}") from None
    for variant in variants:
        try:
            row = compile_variant(variant, args.loops)
        except triton.compiler.errors.CompilationError as err:  # the variant's own fault: said, and the next one
            cause: BaseException = err
            while cause.__cause__ is not None:  # Triton wraps the reason once per enclosing function
                cause = cause.__cause__
            row = {"variant": variant, "error": f"{type(cause).__name__}: {cause}"}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
