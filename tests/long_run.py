"""A run folder shaped as a long run leaves one, for the report's tests and the lab's timing of
`kagent report` (lab/scripts/report_300_turns.py).

Built through kagent's own writers (the trace
through TraceWriter, long outputs as blobs, the workspace through Workspace with one commit and
one ref per attempt), from a scripted session: every turn a model response with thinking, text
and usage priced as claude-sonnet-4-5; edits of a 500-line solution, compiles (some long enough
for a blob), reads, profiles, and an attempt every three turns (benchmarks that pass with varied
scores, regressions and failed checks reverted), a compaction every 50 turns, model retries, a
resume halfway, and the end. The evaluations are synthetic, shaped as the harness writes them (60
correctness cases, two timed contexts, launch counts, an H200's environment named as synthetic),
since on a CPU-only machine no real evaluation has launch counts.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

from kagent.agent.loop.pricing import cost
from kagent.agent.storage.trace import (
    INLINE_LIMIT,
    AttemptRecorded,
    Compacted,
    Finalized,
    ModelRequested,
    ModelResponded,
    ModelRetried,
    RunEnded,
    RunResumed,
    RunStarted,
    ToolFinished,
    ToolStarted,
    TraceWriter,
    UserNotice,
)
from kagent.agent.storage.workspace import Workspace
from kagent.core.messages import Message, ModelResponse, TextBlock, ThinkingBlock, ToolCall, Usage
from kagent.sandbox.results import (
    CheckResult,
    Environment,
    EvalResult,
    LaunchReport,
    Roofline,
    ShapeTiming,
    Stats,
    Verdict,
)
from kagent.tasks import resolve_task
from kagent.tools.evaluation import summarize

KAGENT = str(Path(sys.executable).parent / "kagent")
MODEL = "anthropic:claude-sonnet-4-5"
CONTEXTS = (2048, 8192)
BASELINE_MS = {2048: 9.8, 8192: 11.6}
FLOOR_MS = {2048: 0.29, 8192: 0.31}
TURN_S = 36.0  # a 3-hour run's pace


def _stats(median: float, rng: random.Random) -> Stats:
    spread = median * 0.03
    return Stats(
        n=16,
        median_ms=median,
        mean_ms=median * 1.01,
        p10_ms=median - spread,
        p90_ms=median + spread,
        iqr_ms=spread,
        min_ms=median - 2 * spread,
        max_ms=median + 3 * spread,
    )


def evaluation(mode: str, verdict: Verdict, speedup: float, launches: int, rng: random.Random) -> EvalResult:
    """A result shaped as the harness writes one: 12 fixed and 48 hidden cases, two timed contexts."""
    cases = [
        {
            "case": f"seed {s} ctx {c}",
            "decision_margin": rng.uniform(0.005, 0.1),
            "near_tie": False,
            "passed": verdict is Verdict.PASS,
            "min_cosine": 0.99991 if verdict is Verdict.PASS else 0.83,
            "worst": "L0.S",
        }
        for s in range(6)
        for c in CONTEXTS
    ]
    hidden = [{**case, "case": f"hidden seed #{i} ctx {CONTEXTS[i % 2]}"} for i, case in enumerate(cases * 4)]
    checks = [
        CheckResult(name="load", status="pass", reason="imported, constructed, weights loaded"),
        CheckResult(
            name="fixed_seeds",
            status="pass" if verdict is Verdict.PASS else "fail",
            reason="12 cases, min cosine 0.99991"
            if verdict is Verdict.PASS
            else "fixed_seeds: 12 of 12 cases fail, worst: seed 1 ctx 2048: cosine below 0.98",
            data={"cases": cases},
        ),
    ]
    if verdict is Verdict.PASS:
        checks.append(
            CheckResult(
                name="hidden_seeds", status="pass", reason="48 cases, min cosine 0.99990", data={"cases": hidden}
            )
        )
    timings = []
    if mode == "eval" and verdict is Verdict.PASS:
        for context in CONTEXTS:
            base = BASELINE_MS[context] * rng.uniform(0.97, 1.03)
            own = BASELINE_MS[context] / (speedup * rng.uniform(0.95, 1.05))
            samples = [own * rng.uniform(0.97, 1.05) for _ in range(16)]
            timings.append(
                ShapeTiming(
                    label=f"ctx {context}",
                    context_len=context,
                    steps=64,
                    rounds=8,
                    block_steps=8,
                    baseline=_stats(base, rng),
                    candidate=_stats(own, rng),
                    baseline_samples_ms=samples,
                    candidate_samples_ms=samples,
                    speedup=base / own,
                    ratio_of_medians=base / own,
                    ci_low=base / own * 0.96,
                    ci_high=base / own * 1.04,
                    within_noise=False,
                    roofline=Roofline(
                        bytes_per_step=1_900_000_000,
                        floor_ms=FLOOR_MS[context],
                        candidate_fraction=FLOOR_MS[context] / own,
                        baseline_fraction=FLOOR_MS[context] / base,
                    ),
                )
            )
    score = statistics.geometric_mean([t.speedup for t in timings]) if timings else None
    return EvalResult(
        task="02_kimi_linear_decode",
        task_kind="mega",
        solution="solution.py",
        mode=mode,
        scale="full",
        device="cuda",
        verdict=verdict,
        reason="all 10 checks passed" if verdict is Verdict.PASS else checks[1].reason,
        started_at="2026-12-01T00:00:00+00:00",
        wall_seconds=38.0,
        checks=checks,
        timings=timings,
        score=score,
        launches=[
            LaunchReport(
                who="candidate",
                context_len=2048,
                launches=launches,
                single_launch=launches == 1,
                reported_by="the solution's process",
            ),
            LaunchReport(who="baseline", context_len=2048, launches=412),
        ]
        if timings
        else [],
        environment=Environment(
            device="cuda",
            hostname="synthetic",
            gpu_name="NVIDIA H200 (synthetic)",
            driver="575.57",
            cuda="13.0",
            torch="2.13.0",
            python="3.11.7",
        ),
        hidden_seeds=[rng.randrange(1 << 30) for _ in range(48)],
    )


class Session:
    """Writes the events of a scripted run, turn by turn, with a clock of its own."""

    def __init__(self, run_dir: Path, turns: int, seed: int = 0):
        self.rng = random.Random(seed)
        self.turns = turns
        self.now = 0.0
        self.run_dir = run_dir
        self.trace = TraceWriter(run_dir, elapsed=lambda: self.now)
        task = resolve_task("02_kimi_linear_decode")
        self.reference = (task.path / "reference.py").read_text()
        self.workspace = Workspace.create(
            run_dir / "workspace", [task.path / name for name in ("reference.py", "baseline.py", "shapes.py")]
        )
        self.solution = self.reference
        self.best: tuple[int, float] | None = None
        self.attempt = 0
        self.usage = Usage()
        self.cost = 0.0
        self.calls = 0
        self.config = {
            "version": 1,
            "run_id": run_dir.name,
            "task": "02_kimi_linear_decode",
            "model": MODEL,
            "budget": {"wall_s": 3 * 3600.0, "max_cost_usd": 60.0, "max_tokens": None, "final_slice": 0.1},
            "device": "cuda",
            "scale": "full",
            "solution_name": "solution.py",
        }

    def tick(self, seconds: float) -> None:
        self.now += seconds

    def respond(self, turn: int, calls: list[ToolCall], text: str) -> None:
        self.trace.append(ModelRequested(turn=turn, message_count=2 * turn - 1))
        if turn % 47 == 0:
            self.trace.append(ModelRetried(turn=turn, error="529 overloaded_error: Overloaded", wait_s=8.0, attempt=1))
            self.tick(8)
        thought = "\n".join(
            f"Step {i}: the MoE gate of layer {i % 4} reads its int4 weights twice; fusing the "
            f"dequantization into the GEMV should save {self.rng.randint(3, 12)}% of the bytes."
            for i in range(self.rng.randint(4, 14))
        )
        usage = Usage(
            input_tokens=self.rng.randint(800, 3000),
            output_tokens=self.rng.randint(300, 1800),
            cache_read_tokens=min(140_000, 8_000 + 450 * turn),
            cache_write_tokens=self.rng.randint(0, 2500),
            reasoning_tokens=self.rng.randint(100, 300),
        )
        self.usage += usage
        spent = cost(MODEL, usage)
        self.cost += spent
        response = ModelResponse(
            message=Message(
                role="assistant",
                content=[ThinkingBlock(thinking=thought, signature="sig"), TextBlock(text=text), *calls],
            ),
            stop_reason="tool_use",
            usage=usage,
            model="claude-sonnet-4-5",
        )
        self.tick(self.rng.uniform(4, 20))
        self.trace.append(ModelResponded(turn=turn, response=response.model_dump(mode="json"), cost_usd=spent))

    def call(self, turn: int, name: str, arguments: dict) -> ToolCall:
        self.calls += 1
        return ToolCall(id=f"call_{turn}_{self.calls}", name=name, arguments=arguments)

    def tool(self, turn: int, call: ToolCall, content: str, is_error: bool = False, seconds: float = 1.0) -> None:
        self.trace.append(ToolStarted(turn=turn, call_id=call.id, name=call.name, arguments=call.arguments))
        self.tick(seconds)
        blob = self.trace.blob(content) if len(content) > INLINE_LIMIT else None
        shown = content if blob is None else content[:INLINE_LIMIT] + f"\n… (the rest is in {blob})"
        self.trace.append(
            ToolFinished(
                turn=turn, call_id=call.id, name=call.name, content=shown, is_error=is_error, seconds=seconds, blob=blob
            )
        )

    def notice(self, turn: int) -> None:
        elapsed = self.now
        self.trace.append(
            UserNotice(
                turn=turn,
                text=f"[budget] phase explore; elapsed {elapsed / 60:.1f} min",
                budget={
                    "elapsed": elapsed,
                    "remaining": 3 * 3600 - elapsed,
                    "wall": 3 * 3600.0,
                    "tokens": self.usage.total_tokens,
                    "max_tokens": None,
                    "cost": self.cost,
                    "max_cost": 60.0,
                    "phase": "explore",
                },
            )
        )

    def measure(self, turn: int, kind: str) -> None:
        """A check or benchmark: one attempt, committed and recorded, reverted when it lost."""
        self.attempt += 1
        number = self.attempt
        broken = self.rng.random() < 0.2
        speedup = 1.0 + number * 0.05 + self.rng.uniform(-0.3, 0.2)
        verdict = Verdict.INCORRECT if broken else Verdict.PASS
        result = evaluation("eval" if kind == "benchmark" else "check", verdict, speedup, max(1, 60 - number), self.rng)
        call = self.call(turn, kind, {})
        self.trace.append(ToolStarted(turn=turn, call_id=call.id, name=kind, arguments={}))
        self.tick(38)
        (self.workspace.root / "solution.py").write_text(self.solution)
        sha = self.workspace.commit(f"attempt {number}: {kind} {verdict.value}")
        self.workspace.mark_attempt(number, sha)
        score = result.score if kind == "benchmark" and verdict is Verdict.PASS else None
        kept, reverted_to, note = True, None, "passed"
        if broken:
            note = f"incorrect: {result.reason}"
        elif score is not None and self.best is not None and score < self.best[1] * 0.98:
            note = f"regression: {score:.3f}x against the best {self.best[1]:.3f}x (attempt {self.best[0]})"
        elif score is not None and (self.best is None or score > self.best[1]):
            note = f"new best: {score:.3f}x"
            self.best = (number, score)
            self.workspace.tag_best(sha)
        if not note.startswith(("passed", "new best")) and self.best is not None:
            reverted_to = self.workspace.attempts()[self.best[0]]
            self.workspace.restore(reverted_to)
            self.workspace.commit(f"revert to attempt {self.best[0]}")
            self.solution = (self.workspace.root / "solution.py").read_text()
            kept = False
            note += f" — the workspace was reverted to attempt {self.best[0]}"
        attempt = {
            "number": number,
            "kind": kind,
            "hypothesis": f"fuse step {number} of the MoE into one pass",
            "predicted": f"{speedup:.2f}x at 2048",
            "verdict": verdict.value,
            "reason": result.reason,
            "score": score,
            "speedups": {t.label: t.speedup for t in result.timings} if score else {},
            "files": ["solution.py"],
            "commit": sha,
            "kept": kept,
            "note": note,
            "elapsed_s": round(self.now, 1),
            "tokens": self.usage.total_tokens,
        }
        message = f"Attempt {number} recorded (commit {sha[:10]}): {note}."
        self.trace.append(
            AttemptRecorded(
                attempt=attempt,
                evaluation=result.model_dump(mode="json"),
                commit=sha,
                reverted_to=reverted_to,
                call_id=call.id,
                message=message,
            )
        )
        self.trace.append(
            ToolFinished(
                turn=turn,
                call_id=call.id,
                name=kind,
                content=summarize(result) + "\n\n" + message,
                is_error=False,
                seconds=38.0,
                data={"mode": kind, "verdict": verdict.value, "score": result.score},
            )
        )

    def edit(self, turn: int) -> ToolCall:
        lines = self.solution.splitlines()
        where = self.rng.randrange(40, len(lines) - 1)
        old = lines[where]
        new = old + f"  # tuned in turn {turn}"
        self.solution = self.solution.replace(old, new, 1) if old.strip() else self.solution
        return self.call(turn, "edit_file", {"path": "solution.py", "old": old, "new": new})

    def run(self) -> None:
        task = resolve_task("02_kimi_linear_decode")
        self.trace.append(
            RunStarted(
                run_id=self.run_dir.name,
                config=self.config,
                versions={"kagent": "0.1.0"},
                prompt_sha256="0" * 64,
                tools_sha256="0" * 64,
                system="You optimize GPU code.",
                first_message={
                    "role": "user",
                    "content": [{"type": "text", "text": (task.path / "PROMPT.txt").read_text()}],
                },
                tools=[],
            )
        )
        for turn in range(1, self.turns + 1):
            step = turn % 6
            if turn == 1:
                call = self.call(turn, "write_file", {"path": "solution.py", "content": self.solution})
                self.respond(turn, [call], "A port of the reference first, then measure it.")
                self.tool(turn, call, f"wrote solution.py ({len(self.solution):,} bytes)")
            elif step in (0, 3):
                self.respond(turn, [], "Measuring the change.")
                self.measure(turn, "benchmark" if step == 0 else "check")
            elif step == 1:
                call = self.edit(turn)
                self.respond(turn, [call], "Fusing the next piece of the MoE.")
                self.tool(turn, call, "replaced 1 occurrence in solution.py")
            elif step == 2:
                call = self.call(turn, "shell", {"command": "nvcc -O3 -arch=sm_90 -Xptxas -v kernel.cu -c"})
                self.respond(turn, [call], "Compiling, with the resource report.")
                warnings = "".join(
                    f"ptxas info    : Function properties for kernel_{i}\n    {i * 8} bytes stack "
                    f"frame, 0 bytes spill stores, 0 bytes spill loads\n"
                    for i in range(400 if turn % 18 == 2 else 40)
                )
                self.tool(turn, call, f"exit code 0 ({self.rng.uniform(5, 40):.1f} s)\n{warnings}", seconds=20)
            elif step == 4:
                call = self.call(turn, "read_file", {"path": "solution.py", "offset_line": 200, "limit": 120})
                self.respond(turn, [call], "Reading the MoE part again.")
                self.tool(turn, call, "\n".join(self.solution.splitlines()[200:320]))
            else:
                call = self.call(turn, "profile", {})
                self.respond(turn, [call], "Profiling where the time goes.")
                table = "\n".join(
                    f"kernel_{i:<3} {self.rng.uniform(1, 90):6.2f} us  {self.rng.randint(1, 64):4d} calls"
                    for i in range(60)
                )
                self.tool(turn, call, table, seconds=30)
            self.notice(turn)
            if turn % 50 == 0:
                self.trace.append(
                    Compacted(
                        turn=turn,
                        dropped_messages=150,
                        summary="[compacted] earlier turns summarized.\n" + self.solution[:12_000],
                    )
                )
            if turn == self.turns // 2:
                self.trace.append(
                    RunResumed(segment=1, spent_before_s=self.now, budget_wall_s=3 * 3600.0, torn_tail_dropped=True)
                )
        best, score = self.best if self.best else (None, None)
        final = evaluation("eval", Verdict.PASS, score or 1.0, 1, self.rng) if best else None
        self.tick(120)
        self.trace.append(
            Finalized(
                best_attempt=best,
                commit=self.workspace.head(),
                note="re-verified",
                evaluation=final.model_dump(mode="json") if final else None,
            )
        )
        self.trace.append(
            RunEnded(
                status="finished" if best else "no_result",
                reason="the model finished",
                best_attempt=best,
                best_speedup=score,
                tokens=self.usage.total_tokens,
                cost_usd=self.cost,
            )
        )
        self.trace.close()
        (self.run_dir / "config.json").write_text(json.dumps(self.config))


def build_run(run_dir: Path, turns: int) -> Path:
    """A run folder of ``turns`` turns at ``run_dir``; returns it."""
    Session(run_dir, turns).run()
    return run_dir
