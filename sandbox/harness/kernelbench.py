"""Evaluation of a KernelBench-style single-file task.

The task file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``; the solution
defines ``ModelNew`` with the same constructor arguments. Graded by KernelBench's own
conventions (its src/eval.py), each a job key away:

- both models built after ``torch.manual_seed(42)`` and left in the training mode a module
  starts in, as KernelBench leaves them (``eval_mode``, or ``EVAL_MODE = True`` in the
  problem file, puts them in eval mode);
- ``allclose`` at the tolerance KernelBench takes from the precision: 1e-4 where the outputs
  are fp32, 1e-2 where one is fp16 or bf16 (``atol``, ``rtol``);
- its correctness trials: 5 input sets, each drawn after a seed that
  ``torch.randint(0, 2**32 - 1)`` gives after ``torch.manual_seed(42)`` (``correct_trials``).

kagent adds what KernelBench does not check: inputs drawn at run time, a second call on the
same buffers overwritten, inputs left as they were, and timed calls on fresh secret inputs,
their outputs judged against the baseline's on the same inputs. Speed is measured against the
file's own ``Model``, eager, in a process of its own.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import time
from pathlib import Path
from typing import Any, Optional

import torch

from . import building, compare, lease, timing
from .base import EvaluationBase, arena_bytes_for
from .exchange import Layout
from .job import Job
from .kinds import Step
from .loading import CandidateError, TaskError, load_module
from .remote import layout_of

# KernelBench's correctness trials (num_correct_trials of its evaluation scripts).
CORRECT_TRIALS = 5
# KernelBench's tolerance by precision (get_tolerance_for_precision), atol and rtol alike.
FP32_TOLERANCE = 1e-4
HALF_TOLERANCE = 1e-2
HALF_DTYPES = (torch.float16, torch.bfloat16)
# Timed blocks per contestant, each paired with one of the other's. Five pairs, as before,
# called 5 of 16 evaluations of code identical to the reference a real difference; the
# interval of the median over ABBA units is honest only with a dozen units or more.
TIMED_PAIRS = 40
# The most calls one timed block makes; a block of a fast call lasts about
# timing.MIN_REQUEST_MS.
MAX_CALLS_PER_BLOCK = 4096
# The most bytes of inputs and outputs one block's distinct input sets may hold: each call of
# a block takes an input set of its own, drawn fresh and secret for the block, as far as they
# fit; beyond it the calls take the sets in turn.
TIMED_SETS_BYTES = 512 << 20
# Elements compared at once: a large output compared whole in float64 took 3.7 s and twice
# its size in memory.
COMPARE_CHUNK = 1 << 22
# The evaluation's calls of the reference beside the timed ones (correctness trials, drawn
# inputs, the overwrite check, warm-ups), and the share of the job's time limit they may take
# with the timing: past it, the evaluation stops before it starts.
OVERHEAD_CALLS = 40
TIME_SHARE = 0.8


def _tensors(value: Any) -> list[torch.Tensor]:
    """The output as a flat list of tensors (a model may return a tensor or a tuple)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    raise CandidateError(f"forward returned {type(value).__name__}, expected tensors")


def _input_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _input_tensors(v)]
    return []


def _nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _input_tensors(value))


def trial_seeds(count: int, seed: int = building.KERNELBENCH_SEED) -> list[int]:
    """The seeds of KernelBench's correctness trials: ``count`` draws of
    ``torch.randint(0, 2**32 - 1)`` after ``torch.manual_seed(seed)``."""
    generator = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=generator).item()) for _ in range(count)]


def tolerance_for(outputs: list[torch.Tensor]) -> float:
    """KernelBench's atol and rtol for outputs of these dtypes: its half-precision one where
    any output is fp16 or bf16, else its fp32 one."""
    return HALF_TOLERANCE if any(t.dtype in HALF_DTYPES for t in outputs) else FP32_TOLERANCE


def timed_plan(call_ms: float, set_bytes: int, min_request_ms: float = timing.MIN_REQUEST_MS) -> tuple[int, int]:
    """(calls per timed block, distinct input sets per block) for a reference call of
    ``call_ms``: a block of about ``min_request_ms``, one call where a call takes a quarter
    of that or more (as timing.block_plan rules); as many distinct sets as calls where they
    fit in TIMED_SETS_BYTES."""
    if call_ms >= min_request_ms / 4:
        calls = 1
    else:
        calls = min(MAX_CALLS_PER_BLOCK, math.ceil(min_request_ms / max(call_ms, 1e-3)))
    return calls, max(1, min(calls, TIMED_SETS_BYTES // max(set_bytes, 1)))


def fresh_inputs(problem: Any, seed: int, device: torch.device) -> list:
    """An input set, a correctness seed's or a timed one: ``get_inputs()`` after ``seed``, its
    tensors made on ``device`` itself (the factories' default device). KernelBench draws on the
    CPU and copies; drawing on a GPU gives the same distribution, other values, and costs the
    device's time instead of the host's: a level-1 problem's inputs of several GB a seed,
    drawn a dozen times, took the CPU longer than the evaluation's whole time limit."""
    torch.manual_seed(seed)
    with torch.device(device):
        drawn = problem.get_inputs()
    return [value.to(device) if isinstance(value, torch.Tensor) else value for value in drawn]


def judge(got: Any, expected: list[torch.Tensor], atol: float, rtol: float) -> Optional[str]:
    """Why ``got`` is not ``expected`` within ``atol + rtol·|expected|`` (None: it is),
    compared in float64 a chunk at a time on the device the expected values are on."""
    tensors = _tensors(got)
    if len(tensors) != len(expected):
        return f"forward returned {len(tensors)} tensors, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(tensors, expected, strict=True)):
        if tuple(g.shape) != tuple(e.shape):
            return f"output {i}: shape {tuple(g.shape)}, expected {tuple(e.shape)}"
        flat_g, flat_e = g.reshape(-1), e.reshape(-1)
        worst = 0.0
        for start in range(0, flat_e.numel(), COMPARE_CHUNK):
            a, b = flat_g[start : start + COMPARE_CHUNK], flat_e[start : start + COMPARE_CHUNK]
            if not compare.is_finite(a) and compare.is_finite(b):
                return f"output {i}: non-finite values"
            if not compare.allclose(a, b, atol, rtol):
                worst = max(worst, compare.max_abs_diff(a, b))
        if worst:
            return f"output {i}: max abs difference {worst:.3g} exceeds atol {atol:g} + rtol {rtol:g}·|expected|"
    return None


class KernelBenchEvaluation(EvaluationBase):
    def __init__(self, job: Job, channel, early: dict | None = None, began: float | None = None):
        self.began_at = time.perf_counter() if began is None else began
        super().__init__(job, channel, early, began)
        self.given_atol, self.given_rtol = job.atol, job.rtol
        self.seeds = trial_seeds(job.correct_trials or CORRECT_TRIALS)

    def _load_problem(self) -> None:
        path = Path(self.job.task)
        try:
            self.problem = load_module(building.KERNELBENCH_MODULE, path)
            for name in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(self.problem, name):
                    raise TaskError(f"{path.name} defines no {name}: not a KernelBench problem file")
            self.init_inputs = list(self.problem.get_init_inputs())
        except TaskError:
            raise
        except Exception as err:
            raise TaskError(f"cannot load {path.name}: {type(err).__name__}: {err}") from err
        self.eval_mode = self.job.eval_mode or getattr(self.problem, "EVAL_MODE", False) is True

    def _inputs(self, seed: int) -> list:
        return fresh_inputs(self.problem, seed, self.device)

    def spec(self, who: str) -> building.Spec:
        solution = Path(str(self.job.solution)) if self.job.mode != "aa" else None
        return building.kernelbench_spec(who, Path(self.job.task), solution, self.job.kind.model_class, self.eval_mode)

    def _reference_outputs(self, seeds: list[int]) -> float:
        """The reference's outputs for ``seeds``, kept; whether it writes into its inputs
        (then the problem works in place, and a solution may too); the median call's ms.

        On a GPU only the first seed's (the timed calls' layout and judge) stay on the device;
        the others wait in host memory until their check: a problem's outputs can be GBs each
        (KernelBench's BatchNorm, 4 GiB), and a dozen of them beside the arena ran an 80 GB
        card out of memory before the solution had loaded."""
        self.expected: dict[int, list[torch.Tensor]] = {}
        self.in_place = False
        times = []
        for seed in seeds:
            inputs = self._inputs(seed)
            before = [t.clone() for t in _input_tensors(inputs)]
            started = time.perf_counter()
            out = self.reference(*inputs)
            timing.synchronize(self.device)
            times.append((time.perf_counter() - started) * 1e3)
            self.in_place |= not all(
                compare.bitwise_equal(a, b) for a, b in zip(_input_tensors(inputs), before, strict=True)
            )
            self.single_output = isinstance(out, torch.Tensor)
            kept = self.device if seed == seeds[0] else torch.device("cpu")
            self.expected[seed] = [t.to(kept, copy=True) for t in _tensors(out)]
            del out, inputs, before
        return sorted(times)[len(times) // 2]

    def _expected_on_device(self, seed: int) -> list[torch.Tensor]:
        return [t.to(self.device) for t in self.expected[seed]]

    def run(self) -> None:
        self._load_problem()
        self.phase("load_task")
        with torch.no_grad():
            # The referee's reference, built as every contestant is (building.build).
            self.reference = building.build(self.spec("reference"), self.init_inputs, self.device, module=self.problem)
            self.hidden_seeds = [1000 + secrets.randbelow(1 << 30) for _ in range(self.job.hidden_seeds)]
            call_ms = self._reference_outputs([*self.seeds, *self.hidden_seeds])
            first = self.expected[self.seeds[0]]
            self.atol = float(self.given_atol if self.given_atol is not None else tolerance_for(first))
            self.rtol = float(self.given_rtol if self.given_rtol is not None else tolerance_for(first))
            self.phase("reference_outputs")
            inputs = self._inputs(self.seeds[0])
            min_request_ms = self.job.min_request_ms
            self.calls, self.sets = timed_plan(
                call_ms,
                _nbytes(inputs) + _nbytes(first),
                timing.MIN_REQUEST_MS if min_request_ms is None else float(min_request_ms),
            )
            if self.job.mode != "check":
                self._check_time_left(call_ms)
            # Before the solution's process loads anything: what it leaves in the cache can be trusted.
            self.bw = self.bandwidth() if self.job.mode != "check" else None
            outputs = layout_of(first)
            self.connect_contestants(
                arena_bytes_for(inputs, outputs, *[inputs] * self.sets, *[outputs] * self.sets, outputs)
            )
            weights = self.weights_file(self.reference.state_dict(), None)
            self.begin_trusted(weights, self.init_inputs)
            self.finish_trusted()
            self.calibrate_contestants(lambda: self.reference(*inputs))
            self.seal_cache()
            if not self.finish_load(self.begin_load(self.spec("solution"), self.init_inputs, weights)):
                return
            self.phase("load_solution")
            current = "forward"
            try:
                if not self._correctness():
                    return
                self.phase("check")
                if self.job.mode != "check":
                    current = "timed_calls"
                    with lease.exclusive("timing", shared_after=False):  # the device alone (harness/lease.py)
                        self._performance()
            except CandidateError as err:
                self.solution_failed(current, err)

    def _timing_settings(self) -> timing.Settings:
        """The job's timing knobs, with TIMED_PAIRS rounds where it gives none."""
        return timing.Settings.of(self.job, rounds=TIMED_PAIRS)

    def _check_time_left(self, call_ms: float) -> None:
        """Stop before the evaluation starts where its calls cannot finish in the job's time
        limit at this pace (on the CPU, a KernelBench problem at its real size can take
        seconds a call), with the size that would."""
        settings = self._timing_settings()
        calls = OVERHEAD_CALLS + 2 * (settings.rounds + settings.warmup) * self.calls
        needed_s = calls * call_ms / 1e3
        spent_s = time.perf_counter() - self.began_at
        room_s = self.job.timeout_s * TIME_SHARE - spent_s
        if needed_s <= room_s:
            return
        elsewhere = "" if self.device.type == "cuda" else ", or on a GPU (--device cuda)"
        if room_s <= 0:
            # Drawing the inputs and the reference's outputs took the time: no smaller call fits.
            raise TaskError(
                f"loading the problem, drawing its inputs and running the reference on them took {spent_s:.0f} s, "
                f"all the {self.job.timeout_s * TIME_SHARE:.0f} s its time limit leaves before the timing; "
                f"it finishes with a longer --timeout{elsewhere}, or with smaller inputs (get_inputs)"
            )
        raise TaskError(
            f"a call of the reference takes {call_ms:.0f} ms on {self.device.type}, and an evaluation makes "
            f"about {calls} of them: {needed_s:.0f} s, past the {room_s:.0f} s its time limit leaves; on this "
            f"device it finishes with inputs about {needed_s / room_s:.1f}x smaller (get_inputs){elsewhere}, "
            "or with a longer --timeout"
        )

    def _forward(self, source: str, inputs: list, seed: int) -> dict:
        """One forward in the solution's process on ``inputs`` (fresh copies, or the previous
        call's very tensors overwritten in place), judged against the seed's expected output."""
        solution = self.solution
        solution.slots.reset()
        out = solution.expect(self._returns(self.expected[seed]))
        reply = solution.request(
            {
                "op": "call",
                "method": "__call__",
                "what": "forward",
                "source": source,
                "args": solution.put(inputs),
                "out": out,
                "returns": "forward's return value",
                "check_inputs": not self.in_place,
            },
            "running forward",
        )
        if "bad_return" in reply:
            return {"passed": False, "reason": str(reply["bad_return"])[:500]}
        if reply.get("changed_inputs"):
            which = ", ".join(str(i) for i in reply["changed_inputs"])
            return {
                "passed": False,
                "reason": f"forward wrote into its input tensor(s) {which}; the reference leaves its inputs as "
                "they were, and a caller may use them again (work on a copy, or out of place)",
            }
        failure = judge(solution.take(out), self._expected_on_device(seed), self.atol, self.rtol)
        return {"passed": failure is None, "reason": failure or "allclose"}

    def _returns(self, expected: list[torch.Tensor]) -> Any:
        """What forward must return: one tensor, or a tuple of them, as the reference does."""
        layouts = [Layout.of(t) for t in expected]
        return layouts[0] if self.single_output else tuple(layouts)

    def _correctness(self) -> bool:
        for group, seeds in (("fixed_seeds", self.seeds), ("hidden_seeds", self.hidden_seeds)):
            for seed in seeds:
                outcome = self._forward("fresh", self._inputs(seed), seed)
                if not outcome["passed"]:
                    label = f"seed {seed}" if group == "fixed_seeds" else "a seed drawn for this run"
                    return self.send_check(group, "fail", f"{label}: {outcome['reason']}")
            mode = "eval" if self.eval_mode else "training"
            self.send_check(
                group,
                "pass",
                f"{len(seeds)} input sets allclose (atol {self.atol:g}, rtol {self.rtol:g}; {mode} mode)",
                seeds=seeds,
            )
        # The same input tensors, overwritten in place: a cache keyed by pointer must miss.
        second_seed = self.hidden_seeds[0] if self.hidden_seeds else self.seeds[-1]
        first = self._forward("fresh", self._inputs(self.seeds[0]), self.seeds[0])
        second = self._forward("reuse", self._inputs(second_seed), second_seed)
        if not (first["passed"] and second["passed"]):
            return self.send_check("overwrite_in_place", "fail", f"second call on the same buffers: {second['reason']}")
        return self.send_check("overwrite_in_place", "pass", "a second call on the same, overwritten buffers is right")

    def empty_requests(self, process: Any) -> tuple[dict, dict]:
        # One input set: what a staging request holds does not change an empty block's cost,
        # and calibration stages it many times.
        draws = TimedDraws(self, self.calls, 1)
        return CallsContestant(draws, process, process.who, judged=False).empty_requests()

    def _performance(self) -> None:
        # Every block a whole chain of calls; TIMED_PAIRS of them per contestant; no isolated
        # latency (a call's latency alone is the decode tasks' figure, not KernelBench's).
        settings = dataclasses.replace(self._timing_settings(), block_steps=self.calls, isolated_steps=0)
        draws = TimedDraws(self, self.calls, self.sets)

        def contestants() -> tuple[CallsContestant, CallsContestant]:
            return (
                CallsContestant(draws, self.baseline_process, "baseline", judged=False),
                CallsContestant(draws, self.solution, "candidate", judged=True),
            )

        # The least a forward can move: read every input and parameter once, write the output
        # once. No physics check here: a KernelBench problem's inputs and weights can be small
        # enough to stay in the device's cache between calls, where beating the DRAM floor is
        # honest; a median below it is said (below).
        expected = self.expected[self.seeds[0]]
        inputs = self._inputs(self.seeds[0])
        nbytes = _nbytes(inputs) + _nbytes(expected) + _nbytes(list(self.reference.state_dict().values()))
        shape = timing.Shape("timed_calls", "default", None, self.calls, contestants, nbytes, physics=False)
        results = timing.time_contestants(self, [shape], settings)
        if results is None:
            return
        self._flag_beyond_floor(results[0])
        self.count_launches("__call__", lambda: inputs)

    def _flag_beyond_floor(self, result: dict) -> None:
        """Say so where the solution's median call moves its bytes faster than the device's
        measured copy bandwidth allows: honest only where its data stays in the device's
        cache between calls."""
        roofline = result.get("roofline")
        if roofline and roofline["candidate_fraction"] > timing.PHYSICS_SLACK:
            self.send_check(
                "bytes_floor",
                "pass",
                f"flagged: {result['candidate']['median_ms']:.4g} ms a call is {roofline['candidate_fraction']:.1f}x "
                f"faster than reading its inputs and weights and writing its output once at the measured copy "
                f"bandwidth ({roofline['bytes_per_step'] / 1e6:.3g} MB a call): possible only where they stay in "
                "the device's cache",
                roofline=roofline,
            )


class TimedDraws:
    """The timed calls' inputs: for the k-th timed block of each contestant, ``sets`` input
    sets drawn fresh from seeds no one knows in advance, the same for both contestants'
    k-th blocks (one pair); each call of a block takes the next set in turn. The baseline's
    outputs on a pair's sets are what the candidate's are judged against."""

    def __init__(self, evaluation: KernelBenchEvaluation, calls: int, sets: int):
        self.evaluation, self.calls, self.sets = evaluation, calls, sets
        self.drawn: dict[int, list[list]] = {}
        self.outputs: dict[int, dict[str, list]] = {}
        self.failure: Optional[str] = None
        self.checked = 0

    def inputs(self, block: int) -> list[list]:
        """Block ``block``'s input sets (-1: the warm-ups'), drawn when first asked for."""
        if block not in self.drawn:
            e = self.evaluation
            self.drawn[block] = [fresh_inputs(e.problem, secrets.randbits(63), e.device) for _ in range(self.sets)]
        return self.drawn[block]

    def record(self, block: int, who: str, outputs: list) -> None:
        """One contestant's outputs of block ``block``, a set's each; once both are in, the
        candidate's judged against the baseline's, and the block's sets let go."""
        mine = self.outputs.setdefault(block, {})
        mine[who] = outputs
        if len(mine) < 2:
            return
        e = self.evaluation
        for i, (got, want) in enumerate(zip(mine["candidate"], mine["baseline"], strict=True)):
            if got is None or want is None:
                continue
            failure = judge(got, _tensors(want), e.atol, e.rtol)
            self.checked += 1
            if failure and self.failure is None:
                self.failure = f"timed block {block + 1}, input set {i + 1} (drawn for this run): {failure}"
        del self.outputs[block]
        self.drawn.pop(block, None)


class CallsContestant(timing.Contestant):
    """A KernelBench file's contestant in the timing, in its own process (the baseline's, the
    file's own Model; or the solution's): each block a chain of calls on fresh input sets
    (TimedDraws), staged in the untimed request before it; each set's last output is
    collected after the block, untimed, for the candidate to be judged on."""

    def __init__(self, draws: TimedDraws, process: Any, name: str, judged: bool):
        super().__init__(name, process, draws.calls)
        self.draws, self.judged = draws, judged
        evaluation = draws.evaluation
        process.slots.reset()
        template = evaluation._inputs(evaluation.seeds[0])
        self.input_nodes = [process.put(template) for _ in range(draws.sets)]
        expected = evaluation.expected[evaluation.seeds[0]]
        self.out_nodes = [process.expect(evaluation._returns(expected)) for _ in range(draws.sets)]
        self.block = -1  # the timed block in progress (-1: a warm-up)
        self.timed_blocks = 0

    def plan(self, block_steps: int, chains_per_request: int = 1) -> None:
        """As timing plans it, but one chain a request: a block's calls never outnumber its
        fresh input sets, so that none can be answered from an earlier call."""
        super().plan(block_steps, 1)

    def stage_request(self, copies: int) -> dict:
        if not copies:
            return {"op": "stage", "begins": []}
        self.block = self.timed_blocks if self.checking else -1
        if self.block == -1:  # every warm-up on sets of its own too: its pace sizes the blocks
            self.draws.drawn.pop(-1, None)
        for node, values in zip(self.input_nodes, self.draws.inputs(self.block), strict=True):
            self.process.put_into(node, values)
        timing.synchronize(self.draws.evaluation.device)
        return {"op": "stage", "begins": self.input_nodes}

    def block_request(self, first: int, count: int, chains: int, fresh: bool) -> dict:
        return {
            "op": "repeat",
            "method": "__call__",
            "what": "forward",
            "steps": count * chains,
            "sets": True,
        }

    def chain_done(self, steps_done: int, chains: int) -> None:
        reply = self.process.request(
            {"op": "collect", "outs": self.out_nodes, "returns": "forward's return value"},
            "collecting the outputs of timed calls",
            probe=False,
        )
        if "bad_return" in reply:
            raise CandidateError(str(reply["bad_return"])[:500])
        kept = reply.get("kept", [])
        outputs = [self.process.take(node) if i in kept else None for i, node in enumerate(self.out_nodes)]
        self.draws.record(self.block, self.name, outputs)
        self.timed_blocks += 1

    def verdict(self) -> tuple[str, str]:
        draws = self.draws
        if draws.failure:
            return "fail", draws.failure
        repeat = f", each set {draws.calls // draws.sets}x" if draws.sets < draws.calls else ""
        return "pass", (
            f"{draws.checked} outputs of timed calls allclose to the baseline's on the same inputs, drawn fresh "
            f"for each block ({draws.calls} calls on {draws.sets} input sets a block{repeat})"
        )


class KernelBenchSteps:
    """A forward of ModelNew (or of the file's Model) on the file's inputs, as the instruments
    build it (sandbox/instruments; ``job`` is their ChildJob): built, moded and fed as an
    evaluation builds and feeds them, so that what an instrument shows is what is graded."""

    def _problem(self, job: Any) -> tuple[Path, Any, list, bool]:
        task_file = Path(job.task)
        problem = load_module(building.KERNELBENCH_MODULE, task_file)
        return task_file, problem, list(problem.get_init_inputs()), getattr(problem, "EVAL_MODE", False) is True

    def _reference(self, job: Any, device: torch.device) -> tuple[Any, Any, list, bool]:
        task_file, problem, init, eval_mode = self._problem(job)
        spec = building.kernelbench_spec("reference", task_file, None, job.kind.model_class, eval_mode)
        return building.build(spec, init, device, module=problem), problem, init, eval_mode

    def solution_step(self, job: Any, device: torch.device, module: Any = None) -> Step:
        reference, problem, init, eval_mode = self._reference(job, device)
        solution = building.kernelbench_spec(
            "solution", Path(job.task), Path(str(job.solution)), job.kind.model_class, eval_mode
        )
        model = building.build(
            solution,
            init,
            device,
            reference.state_dict(),
            module=module,
        )
        inputs = fresh_inputs(problem, 0, device)  # the timing seed's inputs
        return model, (lambda: model(*inputs)), None

    def reference_step(self, job: Any, device: torch.device) -> Step:
        model, problem, _, _ = self._reference(job, device)
        inputs = fresh_inputs(problem, job.seed, device)
        return model, (lambda: model(*inputs)), None

    def bytes_floor(self, job: Any, model: Any, context_len: Optional[int]) -> tuple[dict[str, int], int, str]:
        """No roofline: the floor is the solution's weights, read once a call."""
        weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        return {}, weights, "the solution's weights only"
