"""The solve pipeline: read → reduce → run the plan's stages → the result.

The command line, the Python API and the workbench all solve through
:class:`Run`, and all describe what came out with the one :class:`SolveResult`
(which is also the ``--out`` JSON).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..evaluate import all_min_usage, check_solution
from ..instance import Instance
from ..model import Model
from ..nogc import frozen
from ..output import solution_line
from ..start import consistent_start, descend
from .incumbent import Best, Log
from .loop import run_backends
from .options import EPOCH, Options, UsageError, default_work
from .plan import Budget, Facts, Plan, built_in
from .presolve import presolve
from .workers import Children, available_cores


def plan_of(options: Options) -> Plan:
    """The run's plan: the one given, else the built-in one."""
    return options.plan or built_in("prove" if options.prove else "default")


def stages_for(options: Options, model: Model, workers: int, seconds: float):
    """The stages the run's plan gives for this model, worker count and time left."""
    return plan_of(options).stages(Facts.of(model, workers, seconds))


def solve(
    inst: Instance,
    deadline: float,
    best: Best,
    options: Options | None = None,
    model: Model | None = None,
    children: Children | None = None,
    starts: Sequence[Sequence[int]] = (),
) -> dict[str, str]:
    """Presolve ``inst`` (unless ``model`` is given), run the plan's stages until
    ``deadline``, keeping the best verified solution in ``best`` (the first
    offers: its least-using start, then the caller's ``starts``); its child
    processes are ``children``'s. Returns each backend's status in the last
    stage run."""
    from ..reduce import Infeasible, memory_units

    options = options if options is not None else Options()
    log = best.log
    if options.starts:
        best.offer(all_min_usage(inst), "min-usage start")
    for k, x in enumerate(_checked(inst, starts)):
        best.offer(x, f"given start {k + 1}")

    took: list[bool] = []  # whether the consistent start became the best answer

    def consistent() -> None:  # a forbidden-free answer while presolve runs
        if options.starts:
            took.append(best.offer(consistent_start(inst), "consistent start"))

    descended: list[np.ndarray] = []  # offered only if presolve ends too late

    def idle(done: Callable[[], bool]) -> None:  # this core, until presolve ends
        memory_free = inst.usage_limit is None
        ours = options.starts and not options.deterministic  # (compare: the backend's own)
        if ours and memory_free and best.solution is not None:
            descended.append(descend(inst, best.solution, done))

    try:
        if model is None:  # the start and the plan's backends meanwhile, once for all workers
            names = plan_of(options).backend_names()
            model = presolve(
                inst, options.presolve, names, children, meanwhile=consistent,
                deadline=deadline, idle=idle,
            )  # fmt: skip
        else:
            consistent()
    except Infeasible as exc:
        if memory_units(inst)[2]:  # else only the scaled-down memory was infeasible
            best.proved("infeasible")
        log(f"infeasible: {exc}")
        return {}
    if model is None:  # the answer is the best start, descended
        log("presolve did not end before the deadline")
        for x in descended:
            best.offer(x, "descent before presolve")
        if options.deterministic:
            best.cut_short("the clock ran out in presolve")
        return {}
    log("presolve: " + ", ".join(f"{v} {k}" for k, v in model.stats().items()))
    x = model.min_usage_solution()
    offered = options.starts and model.fits(x)
    if offered and not best.offer(model.reconstruct(x), "presolve start", x) and any(took):
        # the workers start from it even behind a cheaper consistent start (only
        # there: behind a clean least-using start they start from nothing, as
        # before; history: *A start before presolve*)
        best.start_from(x)
    workers = options.workers or available_cores()
    if options.deterministic:  # stages end at work counts (each worker's), not moments
        # the time given (a caller that did not budget: up to the deadline)
        given = options.seconds if options.seconds is not None else deadline - best.start
        case = plan_of(options).case(Facts.of(model, workers, given))
        work = options.work
        if work is None:  # the start-up estimated from the instance's strategies
            work = default_work(given, workers, case.pace, len(inst.cost))
        best.budget = work
        log(f"deterministic: {work:g} work units over {workers} workers, seed {options.seed}")
        budget = Budget(0.0, work / workers)
        epoch = min(EPOCH, budget.deadline / 8) or EPOCH  # between barriers
        stages = case.stages
    else:
        budget = Budget(time.monotonic(), deadline)
        stages = stages_for(options, model, workers, budget.deadline - budget.start)
    carry: dict[str, object] = {}  # search states handed from stage to stage
    done, outcome = 0.0, {}
    for k, stage in enumerate(stages):
        begin, end = budget.at(done), budget.at(done + stage.share)
        done += stage.share
        span = None
        if options.deterministic:  # the clock's deadline stays a safety net
            span, end, until = (round(begin, 6), round(end, 6), epoch), deadline, f"work {end:.2f}"
        else:
            until = f"{end - best.start:.1f}s"
        names = stage.workers(workers)
        log(f"stage {k + 1}/{len(stages)} until {until}: {_stage_text(stage, names, workers)}")
        states = carry if stage.inherit else {}
        outcome = run_backends(
            model, best, names, end, seed=options.seed, workers=workers, switch=stage.switch,
            carry=states, span=span, children=children,
        )  # fmt: skip
        if options.deterministic:  # when its work was spent, in seconds: see tools/stress.py
            log(f"stage {k + 1}/{len(stages)} ended at work {best.work or 0.0:.2f}")
        carry.update(states)
        if best.done() or best.cut:
            break
    return outcome


def _checked(inst: Instance, starts: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """The caller's starts as arrays; :class:`UsageError` names the first that is
    no answer to ``inst`` and why (:func:`~maxshard.evaluate.check_solution`)."""
    checked = []
    for k, start in enumerate(starts):
        x = np.asarray(start)
        try:
            if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
                raise ValueError("not a list of integers, one strategy per node")
            checked.append(check_solution(inst, x))
        except ValueError as exc:
            raise UsageError(f"start {k + 1}: {exc}") from None
    return checked


def _stage_text(stage, names: list[str], workers: int) -> str:
    text = ", ".join(names[:workers])
    if names[workers:]:
        text += "; then " + ", ".join(names[workers:])
    if stage.switch:
        text += f"; the switch at {100 * stage.switch:g}%"
    return text


@dataclass
class SolveResult:
    """What a solve produced: the answer (one strategy per node, as the contest
    wants it), its checked cost, the proven bound and what proved it."""

    solution: list[int] | None
    cost: int | None
    lower_bound: int | None
    status: str  # optimal, feasible, infeasible or unknown
    forbidden_picks: int | None
    method: str  # what found the solution
    time_s: float
    trace: list[tuple[float, int | None, int | None]] = field(default_factory=list)
    #: seconds until optimality was proved, and until the target gap was reached
    proved_at: float | None = None
    gap_reached_at: float | None = None
    target_gap: float | None = None
    plan: str = "default"
    seed: int = 0
    peak_usage: int | None = None
    usage_limit: int | None = None
    #: each backend's status at the end of the last stage
    outcome: dict[str, str] = field(default_factory=dict)
    #: a deterministic run: whether it stayed so (None: not asked for), its
    #: budget and the work its workers' reports reached (units), why it did
    #: not stay deterministic, and a fingerprint of the answer
    deterministic: bool | None = None
    work: float | None = None
    work_reached: float | None = None
    cut_short: str | None = None
    fingerprint: str | None = None

    @property
    def gap(self) -> float | None:
        if self.cost is None or self.lower_bound is None or not self.cost:
            return None
        return max(0.0, (self.cost - self.lower_bound) / self.cost)

    def record(self, **extra: object) -> dict:
        """The result as the ``--out`` JSON holds it (``extra`` first)."""
        return {**extra, **asdict(self), "gap": self.gap}


class Run:
    """One solve: holds what it has at every moment, so that an interrupted
    run (a signal, the hard deadline) still ends with its best answer."""

    def __init__(self, options: Options, log: Log, start: float | None = None) -> None:
        self.options, self.log = options, log
        self.start = time.monotonic() if start is None else start
        self.inst: Instance | None = None
        self.best: Best | None = None
        self.outcome: dict[str, str] = {}
        self.children = Children()  # its processes: killed on its way out

    def solve(
        self,
        problem: str | Path | Instance | Callable[[], Instance],
        deadline: float,
        model: Model | None = None,
        starts: Sequence[Sequence[int]] = (),
    ) -> None:
        """Read ``problem`` (a file, an instance, or a function that reads one)
        and solve it until ``deadline``, from the caller's ``starts`` as well as
        its own; its child processes are killed on the way out (reaped by
        :meth:`stop`, once the answer is out)."""
        from ..reader import read_instance

        completed, stopped = False, "stopped before its work budget was spent"
        try:
            if isinstance(problem, Instance):
                self.inst = problem
            elif callable(problem):
                self.inst = problem()
            else:
                self.inst = read_instance(problem)
            self.best = Best(self.inst, self.log, start=self.start, target_gap=self.options.gap)
            if self.options.deterministic:
                self.best.work = 0.0
            with frozen():  # the caller's objects untouched by the children's collections
                self.outcome = solve(
                    self.inst, deadline, self.best, self.options, model, self.children, starts
                )
            completed = True
        except BaseException as exc:  # a signal, the deadline's alarm: what it has stands
            stopped = f"stopped by {exc or type(exc).__name__}"
            raise
        finally:
            if self.best is not None and self.options.deterministic and not completed:
                self.best.cut_short(stopped)  # never claim more than the run knows
            self.children.kill(reap=False)

    def stop(self) -> None:
        """Kill and reap every child process the run still has."""
        self.children.kill()

    def result(self) -> SolveResult:
        best, inst = self.best, self.inst
        ev = best.evaluation if best else None
        return SolveResult(
            solution=None
            if best is None or best.solution is None
            else [int(s) for s in best.solution],
            cost=ev.cost if ev else None,
            lower_bound=best.lower_bound if best else None,
            status=best.status if best else "unknown",
            forbidden_picks=ev.forbidden if ev else None,
            method=best.method if best else "",
            time_s=round(time.monotonic() - self.start, 3),
            trace=list(best.trace) if best else [],
            proved_at=best.proved_at if best else None,
            gap_reached_at=best.gap_reached_at if best else None,
            target_gap=self.options.gap,
            plan=self.options.plan_name(),
            seed=self.options.seed,
            peak_usage=ev.peak if ev else None,
            usage_limit=inst.usage_limit if inst else None,
            outcome=dict(self.outcome),
            **self._deterministic(),
        )

    def _deterministic(self) -> dict:
        if not self.options.deterministic:
            return {}
        best = self.best
        cut = best.cut if best else "nothing was solved"
        text = solution_line(best.solution if best is not None else None)  # as printed
        return {
            "deterministic": cut is None,
            "work": self.options.work if self.options.work is not None else best and best.budget,
            "work_reached": round(best.work, 4) if best and best.work is not None else None,
            "cut_short": cut,
            "fingerprint": hashlib.sha256(text.encode()).hexdigest()[:16],
        }
