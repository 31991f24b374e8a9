"""Plans: which backends run, on how many workers, for what share of the budget.

A plan is data, written in TOML. Its minimal form is a list of stages::

    [[stage]]
    share = 0.6                          # of the time left after presolve
    backends = ["lagrange", "mybackend"] # worker k runs backends[k]
    [[stage]]
    share = 0.4
    backends = ["lns", "lns"]

A stage runs its backends side by side until its share of the budget is
spent, then the next stage starts from the best solution so far. A stage
may also say:

- ``repeat`` (default 0): with more workers than backends, the list goes on
  from this index (``backends = ["dual", "lns", "local"]``, ``repeat = 1``:
  on five workers dual, lns, local, lns, local);
- ``queue``: backends that start, in order, when a worker's backend ends
  before the stage does;
- ``switch``: at this share of the stage, every worker not running the
  backend that found the best solution restarts as that backend, from its
  last handed-over state (the *leader switch*);
- ``inherit`` (default true): a backend starts from the state its namesake
  handed over in an earlier stage (a Lagrangian loop's prices, the ascent's
  duals), so it goes on where it stopped.

A plan (or a case) may say its ``pace``: the work units a worker counts per
second on its stages (:mod:`maxshard.work`), measured. A deterministic run
without ``--work`` sizes its budget by it, to end at
:data:`~maxshard.orchestrate.options.WORK_SHARE` of the time given after the
start-up (:func:`~maxshard.orchestrate.options.default_work`).

A plan that depends on the model is a list of cases, the first whose
``when`` holds is run; the last case has no ``when``::

    [[case]]
    when = { points_max = 2000 }   # also variables_min/_max, workers_min/_max, seconds_min/_max
    [[case.stage]]
    share = 1.0
    backends = ["toulbar2", "lagrange"]
    [[case]]
    [[case.stage]]
    ...

The built-in plans (``default.toml``, ``prove.toml`` beside this file) are
written in this same form; ``maxshard plans`` prints them.

What moves a run from one moment of the plan to the next (a stage's end, the
switch) is :class:`Budget`: shares of the time left become deadlines there
and nowhere else.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

#: The conditions a case may put on the model and the run.
CONDITIONS = {
    "points_max": "the model's kept time points (memory constraints) at most",
    "variables_min": "the model's variables at least",
    "variables_max": "the model's variables at most",
    "workers_min": "workers at least",
    "workers_max": "workers at most",
    "seconds_min": "seconds left after presolve at least (deterministic: the seconds given)",
    "seconds_max": "seconds left after presolve at most (deterministic: the seconds given)",
}
BUILT_IN = ("default", "prove")


class PlanError(ValueError):
    """A plan that cannot be run; the message names the problem."""


@dataclass(frozen=True)
class Stage:
    """One stage: its share of the time and the backends its workers run."""

    share: float
    backends: tuple[str, ...]
    #: None: the list does not repeat (workers beyond it stay idle)
    repeat: int | None = 0
    queue: tuple[str, ...] = ()
    switch: float | None = None
    inherit: bool = True

    def workers(self, n: int) -> list[str]:
        """The backend of each of ``n`` workers, then the queued ones."""
        names = list(self.backends[:n])
        if self.repeat is not None:
            cycle = self.backends[self.repeat :]
            names += [cycle[k % len(cycle)] for k in range(n - len(names))]
        return names + list(self.queue)


@dataclass(frozen=True)
class Facts:
    """What a case's conditions are checked against."""

    points: int
    variables: int
    workers: int
    seconds: float = math.inf

    @classmethod
    def of(cls, model: Any, workers: int, seconds: float = math.inf) -> Facts:
        return cls(len(model.base), int(model.nv), workers, seconds)

    def meet(self, when: dict[str, float]) -> bool:
        values = {"points": self.points, "variables": self.variables,
                  "workers": self.workers, "seconds": self.seconds}  # fmt: skip
        for key, limit in when.items():
            what, bound = key.rsplit("_", 1)
            if (values[what] > limit) if bound == "max" else (values[what] < limit):
                return False
        return True


#: Work units a worker counts per second on this machine, for a case that
#: does not say (``pace``): low, so that an unmeasured plan ends early rather
#: than late (docs/history.md, *Deterministic budgets*).
DEFAULT_PACE = 0.5


@dataclass(frozen=True)
class Case:
    stages: tuple[Stage, ...]
    when: dict[str, float] = field(default_factory=dict)
    #: work units a worker counts per second of this machine on the case's
    #: stages (sizes a deterministic run's default budget: see
    #: :func:`maxshard.orchestrate.options.default_work`)
    pace: float = DEFAULT_PACE


@dataclass(frozen=True)
class Plan:
    name: str
    cases: tuple[Case, ...]

    def case(self, facts: Facts) -> Case:
        """The first case whose conditions ``facts`` meet."""
        return next(c for c in self.cases if facts.meet(c.when))

    def stages(self, facts: Facts) -> tuple[Stage, ...]:
        """The stages of :meth:`case`."""
        return self.case(facts).stages

    def backend_names(self) -> set[str]:
        return {n for c in self.cases for s in c.stages for n in (*s.backends, *s.queue)}

    @classmethod
    def of_backends(cls, names: list[str], workers: int) -> Plan:
        """The plan of ``-b A -b B ...``: one stage, the named backends in turn,
        one per worker, the rest as workers free up."""
        stage = Stage(1.0, tuple(names[:workers]), None, tuple(names[workers:]))
        return cls(" ".join(names), (Case((stage,)),))


@dataclass(frozen=True)
class Budget:
    """Turns shares of the time between ``start`` and ``deadline`` into moments:
    the one place a run's clock decides when a stage ends or the switch comes
    (in a deterministic run: shares of each worker's work, in work units)."""

    start: float
    deadline: float

    def at(self, share: float) -> float:
        return (
            self.deadline
            if share >= 1 - 1e-9
            else self.start + share * (self.deadline - self.start)
        )


# -- reading ------------------------------------------------------------------------

STAGE_KEYS = {"share", "backends", "repeat", "queue", "switch", "inherit"}


def parse(text: str, name: str = "plan") -> Plan:
    """Read a plan from TOML text; PlanError names what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{name}: not valid TOML ({exc})") from None
    unknown = set(data) - {"stage", "case", "name", "description", "pace"}
    if unknown:
        raise PlanError(
            f"{name}: unknown key {sorted(unknown)[0]!r} (a plan has [[stage]] or [[case]])"
        )
    if ("stage" in data) == ("case" in data):
        raise PlanError(f"{name}: a plan has either [[stage]] tables or [[case]] tables, not "
                        + ("both" if "stage" in data else "neither"))  # fmt: skip
    if "stage" in data:
        cases = [_case({k: v for k, v in data.items() if k in ("stage", "pace")}, name, True)]
    else:
        raw = data["case"]
        if not isinstance(raw, list) or not raw:
            raise PlanError(f"{name}: 'case' must be [[case]] tables")
        cases = [_case(c, f"{name}, case {k + 1}", k == len(raw) - 1) for k, c in enumerate(raw)]
    return Plan(str(data.get("name", name)), tuple(cases))


def _case(raw: Any, where: str, last: bool) -> Case:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: must be a table")
    unknown = set(raw) - {"when", "stage", "pace"}
    if unknown:
        raise PlanError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    when = raw.get("when", {})
    if not isinstance(when, dict):
        raise PlanError(f"{where}: 'when' must be a table such as {{ points_max = 2000 }}")
    for key, value in when.items():
        if key not in CONDITIONS:
            raise PlanError(f"{where}: unknown condition {key!r} (known: {', '.join(CONDITIONS)})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PlanError(f"{where}: condition {key} must be a number, got {value!r}")
    if last and when:
        raise PlanError(f"{where}: the last case must have no 'when' (it is the fallback)")
    stages = raw.get("stage")
    if not isinstance(stages, list) or not stages:
        raise PlanError(f"{where}: no stage (add a [[stage]] table)")
    parsed = tuple(_stage(s, f"{where}, stage {k + 1}") for k, s in enumerate(stages))
    total = sum(s.share for s in parsed)
    if abs(total - 1) > 1e-6:
        raise PlanError(f"{where}: the stages' shares add up to {total:g}, not 1")
    pace = raw.get("pace", DEFAULT_PACE)
    if isinstance(pace, bool) or not isinstance(pace, int | float) or not pace > 0:
        raise PlanError(f"{where}: 'pace' must be a positive number of work units a second, "
                        f"got {pace!r}")  # fmt: skip
    return Case(parsed, dict(when), float(pace))


def _stage(raw: Any, where: str) -> Stage:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: must be a table")
    unknown = set(raw) - STAGE_KEYS
    if unknown:
        raise PlanError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(STAGE_KEYS))})"
        )
    share = raw.get("share")
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise PlanError(f"{where}: 'share' must be a number in (0, 1], got {share!r}")
    backends = _names(raw.get("backends"), "backends", where)
    if not backends:
        raise PlanError(f"{where}: no backend ('backends' lists one per worker)")
    queue = _names(raw.get("queue", []), "queue", where)
    repeat = raw.get("repeat", 0)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 0 <= repeat < len(backends):
        raise PlanError(f"{where}: 'repeat' must be an index into backends, got {repeat!r}")
    switch = raw.get("switch")
    if switch is not None and (
        isinstance(switch, bool) or not isinstance(switch, int | float) or not 0 < switch < 1
    ):
        raise PlanError(f"{where}: 'switch' must be a share of the stage in (0, 1), got {switch!r}")
    inherit = raw.get("inherit", True)
    if not isinstance(inherit, bool):
        raise PlanError(f"{where}: 'inherit' must be true or false, got {inherit!r}")
    return Stage(float(share), backends, repeat, queue, switch, inherit)


def _names(value: Any, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PlanError(f"{where}: {key!r} must be a list of backend names, got {value!r}")
    return tuple(value)


def load(path: str | Path) -> Plan:
    """Read a plan file and check that every backend it names is known."""
    from ..backend import BackendError
    from ..registry import check_names

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not a text file") from None
    plan = parse(text, str(path))
    try:
        check_names(sorted(plan.backend_names()))
    except BackendError as exc:
        raise PlanError(f"{path}: {exc}") from None
    return plan


def choose(plan: str | Path | Plan | None, backends: list[str] | None, workers: int) -> Plan | None:
    """The plan a run is given: a plan or its file, or backends named one by one
    (:meth:`Plan.of_backends` on ``workers``); None: the built-in one. PlanError
    when both are given or the file is bad."""
    if plan is not None and backends:
        raise PlanError("give a plan (--plan) or backends (-b), not both")
    if backends:
        return Plan.of_backends(list(backends), workers)
    return plan if plan is None or isinstance(plan, Plan) else load(plan)


def built_in_text(name: str) -> str:
    """The TOML text of built-in plan ``name`` (default or prove)."""
    if name not in BUILT_IN:
        raise PlanError(f"unknown built-in plan {name!r} (known: {', '.join(BUILT_IN)})")
    return resources.files(__package__).joinpath(f"{name}.toml").read_text()


def built_in(name: str) -> Plan:
    return parse(built_in_text(name), name)


WORDS = {"points": "time points", "variables": "variables", "workers": "workers",
         "seconds": "seconds left"}  # fmt: skip


def describe(plan: Plan) -> str:
    """The plan in words: one line per stage, under each case's conditions and
    pace."""
    lines = [f"plan {plan.name}:"]
    for case in plan.cases:
        conds = []
        for key, value in case.when.items():
            what, bound = key.rsplit("_", 1)
            if bound == "max" and case.when.get(f"{what}_min") == value:
                continue  # said once, as "="
            if bound == "min" and case.when.get(f"{what}_max") == value:
                conds.append(f"{WORDS[what]} = {value:g}")
            else:
                conds.append(f"{WORDS[what]} {'<=' if bound == 'max' else '>='} {value:g}")
        head = "when " + ", ".join(conds) if conds else "otherwise"
        lines.append(f"  {head} (deterministic pace {case.pace:g}):")
        for k, s in enumerate(case.stages):
            lines.append(f"    stage {k + 1}, {100 * s.share:g}% of the time: {_workers(s)}")
    return "\n".join(lines)


def _workers(stage: Stage) -> str:
    text = "one per worker: " + ", ".join(stage.backends)
    if stage.repeat is not None:
        text += f" (then from {stage.backends[stage.repeat]} again)"
    if stage.queue:
        text += f"; as a worker's backend ends: {', '.join(stage.queue)}"
    if stage.switch is not None:
        text += f"; at {100 * stage.switch:g}% the workers behind restart as the leader"
    return text
