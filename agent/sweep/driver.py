"""The sweep: its members launched on an engine as slots free up, within the sweep's budgets,
everything recorded; and resumed after the driver died.

Budgets. Each member gets the per-run wall budget, or what is left of the sweep's total one
if that is less (none starts with under MIN_MEMBER_S), so the sweep ends within its total and
a member's grace. A cost cap is shared out as members start: each gets an equal share of
what is neither spent nor promised to members still running, so the sweep's cost cannot pass
the cap (a member keeps to its own `--max-cost`, as any run does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kagent.agent.settings import MIN_RUN_BUDGET_S
from kagent.agent.storage.lock import RunLock
from kagent.agent.sweep.engines import Engine, LocalEngine, RayEngine
from kagent.agent.sweep.figures import MemberFigures, read_figures
from kagent.agent.sweep.member import MemberJob, MemberOutcome, runs_of
from kagent.agent.sweep.plan import Member, SweepSpec, plan_members
from kagent.agent.sweep.record import (
    MemberEnded,
    MemberLaunched,
    MemberState,
    RecordWriter,
    SweepEnded,
    SweepResumed,
    SweepStarted,
    SweepView,
    fold,
    read_record,
    this_host,
)
from kagent.agent.sweep.usage import SAMPLES_NAME, GpuSampler
from kagent.core.errors import KagentError

# The least wall budget a member is started with, out of what the sweep's total leaves: the
# least its `kagent run` takes.
MIN_MEMBER_S = MIN_RUN_BUDGET_S
POLL_S = 2.0
# A share of the cost cap below this buys nothing: the member is skipped instead.
MIN_MEMBER_COST_USD = 0.01


def sweeps_folder(root: Optional[Path] = None) -> Path:
    """Where sweeps live: <runs folder>/sweeps (the runs folder: --root, KAGENT_RUNS or ./runs)."""
    from kagent.core.paths import runs_folder

    return runs_folder(root)[0] / "sweeps"


def create_sweep(spec: SweepSpec, root: Optional[Path] = None) -> Path:
    """The sweep's folder and the first entry of its record: its settings and members."""
    from kagent.agent.lifecycle.runs import versions

    sweep_dir = sweeps_folder(root) / spec.sweep_id
    try:
        sweep_dir.mkdir(parents=True)
    except FileExistsError:
        raise KagentError(
            f"there is a sweep {spec.sweep_id} already ({sweep_dir})",
            hint=f"kagent sweep --resume {spec.sweep_id} goes on with it",
        ) from None
    members = plan_members(spec)
    host, pid = this_host()
    writer = RecordWriter(sweep_dir)
    writer.append(SweepStarted(spec=spec, members=members, host=host, pid=pid, versions=versions()))
    writer.close()
    return sweep_dir


def find_sweep(sweep: Optional[str], root: Optional[Path] = None) -> Path:
    """A sweep's folder from its id, its path, or (None) the newest sweep."""
    folder = sweeps_folder(root)
    if sweep is None:
        found = sorted((p for p in folder.glob("*/sweep.jsonl")), key=lambda p: p.stat().st_mtime)
        if not found:
            raise KagentError(f"no sweep in {folder} yet", hint="start one with `kagent sweep TASK... --model M`")
        return found[-1].parent
    for candidate in (Path(sweep), folder / sweep):
        if (candidate / "sweep.jsonl").is_file():
            return candidate
    raise KagentError(f"no sweep {sweep!r} in {folder}, nor a sweep folder at {Path(sweep).absolute()}")


@dataclass
class Allowance:
    budget_s: float
    max_cost_usd: Optional[float]


class Budgets:
    """The sweep's total wall budget and cost cap, handed out as members start."""

    def __init__(self, spec: SweepSpec, view: SweepView, elapsed: Callable[[], float]):
        self.spec, self.elapsed = spec, elapsed
        self.spent_usd = sum(s.ended.figures.cost_usd for s in view.members.values() if s.ended is not None)
        self.promised: dict[str, float] = {}  # the cost shares of the members running now

    def allow(self, state: MemberState, members_left: int) -> Optional[Allowance]:
        """What a member may spend, or None: nothing is left for it. A member that goes on
        (its run exists) keeps the budget and share it started with."""
        spec = self.spec
        if state.resumed or state.launches:
            share = state.max_cost_usd
            if share is not None:
                self.promised[state.member.run_id] = share
            return Allowance(spec.budget_s, share)
        budget_s = spec.budget_s
        if spec.total_budget_s is not None:
            budget_s = min(budget_s, spec.total_budget_s - self.elapsed())
            if budget_s < MIN_MEMBER_S:
                return None
        share = None
        if spec.max_cost_usd is not None:
            share = (spec.max_cost_usd - self.spent_usd - sum(self.promised.values())) / max(1, members_left)
            if share < MIN_MEMBER_COST_USD:
                return None
            self.promised[state.member.run_id] = share
        return Allowance(budget_s, share)

    def settle(self, run_id: str, cost_usd: float) -> None:
        self.promised.pop(run_id, None)
        self.spent_usd += cost_usd


def make_engine(spec: SweepSpec) -> Engine:
    if spec.engine == "ray":
        return RayEngine(spec.ray_address or "auto", spec.device, spec.per_gpu, spec.retries)
    return LocalEngine(spec.device, spec.per_gpu, spec.gpus)


def _job(spec: SweepSpec, sweep_dir: Path, member: Member, allowance: Allowance) -> MemberJob:
    return MemberJob(
        member=member,
        sweep_dir=sweep_dir,
        budget_s=allowance.budget_s,
        max_cost_usd=allowance.max_cost_usd,
        max_tokens=spec.max_tokens,
        device=spec.device,
        scale=spec.scale,
        run_config=spec.run_config,
        retries=spec.retries,
        grace_s=spec.grace_s,
    )


def _to_run(state: MemberState) -> bool:
    """Whether a member still has to be driven: never started, cut, or interrupted by an outage."""
    ended = state.ended
    return (
        ended is None
        or ended.outcome == "cut"
        or ended.outcome == "skipped"
        and not state.launches
        or ended.outcome == "ended"
        and ended.run_state == "interrupted"
    )


def drive_sweep(
    sweep_dir: Path,
    resume_spec: Optional[SweepSpec] = None,
    on_update: Callable[[Path], None] = lambda sweep_dir: None,
    make: Callable[[SweepSpec], Engine] = make_engine,
) -> SweepView:
    """Drive the sweep in ``sweep_dir`` until every member has ended (or nothing is left for
    them); on a resume, ``resume_spec`` is the settings from now on. Returns the final view."""
    with RunLock(sweep_dir):
        entries = read_record(sweep_dir)
        view = fold(entries)
        writer = RecordWriter(sweep_dir, spent_before_s=view.elapsed_s, next_seq=view.next_seq)
        try:
            if len(entries) > 1 or resume_spec is not None:
                spec = resume_spec or view.spec
                cut = [run_id for run_id, s in view.members.items() if s.running]
                host, pid = this_host()
                writer.append(SweepResumed(segment=view.resumes + 1, spec=spec, cut=cut, host=host, pid=pid))
                for run_id in cut:  # what the dead driver left running is cut: it goes on below
                    writer.append(MemberEnded(run_id=run_id, outcome="cut", detail="the sweep's driver stopped"))
                view = fold(read_record(sweep_dir))
            reason = _launch_all(sweep_dir, view, writer, on_update, make)
            writer.append(SweepEnded(reason=reason))
        finally:
            writer.close()
    view = fold(read_record(sweep_dir))
    on_update(sweep_dir)
    return view


def _launch_all(
    sweep_dir: Path,
    view: SweepView,
    writer: RecordWriter,
    on_update: Callable[[Path], None],
    make: Callable[[SweepSpec], Engine],
) -> str:
    spec = view.spec
    waiting = [s for s in view.members.values() if _to_run(s)]
    if not waiting:
        return "every member had ended"
    engine = make(spec)
    sampler = GpuSampler(Path(sweep_dir) / SAMPLES_NAME).start() if engine.device == "cuda" else None
    budgets = Budgets(spec, view, writer.elapsed)
    running: set[str] = set()
    try:
        while waiting or running:
            while waiting and len(running) < engine.capacity:
                state = waiting.pop(0)
                allowance = budgets.allow(state, members_left=len(waiting) + 1)
                if allowance is None:
                    writer.append(
                        MemberEnded(
                            run_id=state.member.run_id,
                            outcome="skipped",
                            detail="the sweep's total budget or cost cap left nothing for it",
                        )
                    )
                    continue
                engine.start(_job(spec, sweep_dir, state.member, allowance))
                running.add(state.member.run_id)
                writer.append(
                    MemberLaunched(
                        run_id=state.member.run_id,
                        resume=bool(state.launches),
                        budget_s=allowance.budget_s,
                        max_cost_usd=allowance.max_cost_usd,
                        engine=engine.name,
                    )
                )
            for outcome in engine.finished(POLL_S):
                running.discard(outcome.run_id)
                figures = read_figures(runs_of(sweep_dir) / outcome.run_id)
                budgets.settle(outcome.run_id, figures.cost_usd)
                writer.append(_ended(outcome, figures))
            on_update(sweep_dir)
    except KeyboardInterrupt:
        engine.stop()
        for run_id in sorted(running):
            writer.append(
                MemberEnded(
                    run_id=run_id,
                    outcome="cut",
                    detail="stopped with the sweep (Ctrl-C)",
                    figures=read_figures(runs_of(sweep_dir) / run_id),
                )
            )
        raise
    finally:
        if sampler is not None:
            sampler.stop()
    engine.stop()
    return "every member has ended"


def _ended(outcome: MemberOutcome, figures: MemberFigures) -> MemberEnded:
    return MemberEnded(
        run_id=outcome.run_id,
        outcome=outcome.outcome,
        run_state=outcome.run_state,
        exit_code=outcome.exit_code,
        detail=outcome.detail,
        segments=outcome.segments,
        figures=figures,
    )
