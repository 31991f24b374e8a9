"""The incumbent: the best evaluator-checked answer of a run, its proven bound,
and the rules by which a bound proves it (optimal, infeasible, within a gap).

Every solution is re-costed by the exact evaluator on the full instance
before it is kept, so only answers the contest would accept are ever held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..evaluate import Evaluation, evaluate
from ..instance import Instance

Log = Callable[[str], None]


@dataclass
class Best:
    """The best evaluator-checked solution seen so far."""

    inst: Instance
    log: Log
    start: float = field(default_factory=time.monotonic)
    solution: np.ndarray | None = None
    #: the workers' start, in the model's form: the best answer's, or while that
    #: has none (a start made before presolve) the presolve start (:meth:`start_from`)
    model_x: np.ndarray | None = None
    evaluation: Evaluation | None = None
    method: str = ""
    lower_bound: int | None = None
    status: str = "unknown"
    #: (seconds since start, best cost, best bound) at every improvement of either
    trace: list[tuple[float, int | None, int | None]] = field(default_factory=list)
    #: seconds since start when optimality (or infeasibility) was proved
    proved_at: float | None = None
    #: stop once the proven gap (see :meth:`gap`) is at most this
    target_gap: float | None = None
    #: seconds since start when the target gap was reached
    gap_reached_at: float | None = None
    #: a deterministic run's work so far (units): its trace and proofs are
    #: stamped with it instead of seconds; None in a normal run
    work: float | None = None
    #: a deterministic run's work budget (units, over all workers), once known
    budget: float | None = None
    #: why a deterministic run was not deterministic after all (cut short by the clock)
    cut: str | None = None

    def elapsed(self) -> float:
        """Seconds since start, or the work so far in a deterministic run."""
        return time.monotonic() - self.start if self.work is None else self.work

    def cut_short(self, why: str) -> None:
        if self.cut is None:
            self.cut = why
            self.log(f"not deterministic: {why}")

    def _record(self) -> None:
        cost = self.evaluation.cost if self.evaluation is not None else None
        self.trace.append((round(self.elapsed(), 4), cost, self.lower_bound))

    def proved(self, status: str) -> None:
        """Mark the answer proved: ``optimal`` or ``infeasible``."""
        self.status = status
        if self.proved_at is None:
            self.proved_at = round(self.elapsed(), 4)

    def offer(self, solution: np.ndarray, method: str, model_x: np.ndarray | None = None) -> bool:
        ev = evaluate(self.inst, solution)
        if not ev.feasible:
            return False
        # the contest's order: fewest forbidden picks, then least cost
        key = (ev.forbidden, ev.cost)
        if self.evaluation is not None and key >= (self.evaluation.forbidden, self.evaluation.cost):
            return False
        self.solution, self.evaluation, self.method, self.model_x = solution, ev, method, model_x
        self.status = "feasible"
        cost = self.clean_cost()
        if cost is not None and self.lower_bound is not None and self.lower_bound > cost:
            self.log(f"warning: the lower bound {self.lower_bound} exceeds the checked cost "
                     f"{cost}; dropped")  # fmt: skip
            self.lower_bound = None
        self._record()
        self.log(self.describe())
        return True

    def start_from(self, model_x: np.ndarray) -> None:
        """Give the workers ``model_x`` (the model's form) to start from while
        the best answer has no model form of its own."""
        if self.model_x is None:
            self.model_x = model_x

    def bound(self, value: int, method: str) -> None:
        cost = self.clean_cost()
        if cost is not None and value > cost:
            # no valid bound exceeds the cost of an answer that fits: a backend
            # bug, which must not end the run as a proof
            self.log(f"warning: {method} claimed the lower bound {value}, above the checked "
                     f"cost {cost}; ignored")  # fmt: skip
            return
        if self.lower_bound is None or value > self.lower_bound:
            self.lower_bound = value
            self._record()
            if self.evaluation is not None:
                self.log(self.describe(f"bound by {method}"))

    def clean_cost(self) -> int | None:
        """The checked cost of the answer if it has no forbidden pick (the only
        answers a bound can prove optimal or be checked against), else None."""
        ev = self.evaluation
        return ev.cost if ev is not None and not ev.forbidden else None

    def closed(self) -> bool:
        """A clean answer whose cost the proven bound reaches: it is optimal."""
        cost, bound = self.clean_cost(), self.lower_bound
        return cost is not None and bound is not None and bound >= cost

    def done(self) -> bool:
        """Nothing left to do: proved optimal or infeasible, or within the target
        gap (a clean answer whose cost the proven bound is that close to)."""
        gap = self.gap()
        reached = (
            self.target_gap is not None
            and gap is not None
            and self.clean_cost() is not None
            and gap <= self.target_gap
        )
        if reached and self.gap_reached_at is None:
            self.gap_reached_at = round(self.elapsed(), 4)
            self.log(self.describe(f"proven within the target gap {100 * self.target_gap:g}%"))
        return reached or self.status in ("optimal", "infeasible")

    def gap(self) -> float | None:
        if self.evaluation is None or self.lower_bound is None or not self.evaluation.cost:
            return None
        return max(0.0, (self.evaluation.cost - self.lower_bound) / self.evaluation.cost)

    def describe(self, event: str = "") -> str:
        ev = self.evaluation
        assert ev is not None
        parts = [f"Found solution with cost {ev.cost}"]
        if ev.forbidden:
            parts.append(f"({ev.forbidden} forbidden picks)")
        if self.lower_bound is not None:
            parts.append(f"bound {self.lower_bound} gap {100 * (self.gap() or 0.0):.3f}%")
        unit = "s" if self.work is None else " work"
        parts.append(f"by {self.method} at {self.elapsed():.1f}{unit}")
        if event:
            parts.append(f"[{event}]")
        return " ".join(parts)


#: What a backend's proof means when memory was scaled down: nothing.
UNPROVEN = {"optimal": "feasible", "infeasible": "unknown"}
