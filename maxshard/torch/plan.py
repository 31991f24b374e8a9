"""Plan: solve a traced step with maxshard and read the answer back as
placements, redistributions and an estimated step time beside the
hand-written baselines."""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..evaluate import all_min_usage, evaluate
from ..instance import Instance
from ..start import descend
from .baselines import baselines
from .costs import inputs_of
from .network import Network
from .trace import TorchPlanError, Traced, trace


@dataclass(frozen=True)
class Redistribution:
    """An input of an operator moved from its producer's placement."""

    producer: str
    source: tuple
    target: tuple


@dataclass(frozen=True)
class OpPlacement:
    """One node of the traced step under the plan."""

    name: str  # the graph node's name
    op: str  # the operator (aten overload), or "input"
    output: tuple  # placements of its (first) output
    redistributions: tuple[Redistribution, ...]


@dataclass(frozen=True)
class Costed:
    """An assignment priced by the evaluator: nanoseconds and bytes per device."""

    cost: int
    compute: int
    communication: int
    peak_memory: int
    fits: bool
    forbidden: int


@dataclass
class ShardingPlan:
    """What :func:`plan` returns (see the README's torch section)."""

    traced: Traced
    solution: list[int]
    cost: int  # estimated step time, ns (compute + communication)
    peak_memory: int  # bytes per device
    placements: dict[str, tuple]  # parameter name -> placements
    ops: list[OpPlacement]
    baselines: dict[str, Costed]
    costed: Costed
    method: str  # what found the solution
    lower_bound: int | None = None
    solve_seconds: float = 0.0
    result: Any = None  # the maxshard Result
    deterministic: bool | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One table: the plan and the baselines, side by side."""
        t = self.traced
        stats, limit = t.stats(), t.instance.usage_limit
        mesh = "x".join(map(str, t.mesh))
        lines = [
            f"plan for {t.instance.name.rsplit('-', 1)[0]} on a {mesh} mesh "
            f"({int(np.prod(t.mesh))} devices)",
            f"instance: {stats['nodes']} nodes, {stats['strategies']} strategies, "
            f"{stats['edges']} edges, {stats['time points']} time points",
            "seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in t.seconds.items())
            + f", solve {self.solve_seconds:.2f}",
            f"found by {self.method}; "
            + ("no bound" if self.lower_bound is None else f"lower bound {_time(self.lower_bound)}")
            + ("" if limit is None else f"; memory limit {_bytes(limit)}"),
            "",
            f"{'':16}{'step time':>12}{'compute':>12}{'comm':>12}{'peak memory':>14}  fits",
        ]  # fmt: skip
        for label, c in [("maxshard", self.costed), *self.baselines.items()]:
            step = "forbidden" if c.forbidden else _time(c.cost)
            lines.append(
                f"{label:16}{step:>12}{_time(c.compute):>12}{_time(c.communication):>12}"
                f"{_bytes(c.peak_memory):>14}  {'yes' if c.fits else 'no'}"
            )
        if t.replicated:
            names = ", ".join(f"{n} ({why})" for n, why in sorted(t.replicated.items()))
            lines += ["", f"replicated, DTensor has no strategy: {names}"]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The plan as plain data (``--out``)."""
        return {
            "model": self.traced.instance.name,
            "mesh": list(self.traced.mesh),
            "cost_ns": self.cost,
            "peak_memory_bytes": self.peak_memory,
            "lower_bound_ns": self.lower_bound,
            "method": self.method,
            "deterministic": self.deterministic,
            "solution": self.solution,
            "placements": {k: [str(p) for p in v] for k, v in self.placements.items()},
            "ops": [
                {
                    "name": o.name,
                    "op": o.op,
                    "output": [str(p) for p in o.output],
                    "redistributions": [
                        {
                            "from": r.producer,
                            "source": [str(p) for p in r.source],
                            "target": [str(p) for p in r.target],
                        }
                        for r in o.redistributions
                    ],
                }
                for o in self.ops
            ],  # fmt: skip
            "baselines": {k: vars(v) for k, v in self.baselines.items()},
            "replicated": self.traced.replicated,
        }


#: Rounds of the baselines' descent before the solve, at most (it stops
#: sooner, where no node alone can gain: 7 rounds from data parallel on
#: LLaMA-3 8B 32 layers 2x2x2; history: *The torch plan's starts descended*)
DESCENT_ROUNDS = 50


def _descended(inst: Instance, assignments: list[np.ndarray]) -> list[np.ndarray]:
    """The cheapest of ``assignments`` after :func:`maxshard.start.descend`
    (none where memory is limited): the solve starts from a plan no single
    node's change improves. A set number of rounds, so a deterministic plan
    stays so."""
    if inst.usage_limit is not None or not assignments:
        return []
    cheapest = min(assignments, key=lambda x: evaluate(inst, x).cost)
    rounds = iter(range(DESCENT_ROUNDS))
    return [descend(inst, cheapest, lambda: next(rounds, None) is None)]


def plan(
    model: torch.nn.Module,
    args: Any,
    mesh: str | Sequence[int] = (2, 4),
    memory: int | str | None = None,
    timeout: float = 10.0,
    loss: Callable[[Any], torch.Tensor] | None = None,
    optimizer_states: int = 0,
    network: Network | None = None,
    log: Callable[[str], None] | None = None,
    **solve_options: Any,
) -> ShardingPlan:
    """Trace ``model`` on ``args`` (see :func:`maxshard.torch.trace`), solve
    the instance with :func:`maxshard.solve` within ``timeout`` seconds
    (``solve_options``: ``deterministic``, ``seed``, ``plan``, ``backends``,
    ...) and return the plan: the cheapest of maxshard's answer and the
    baselines, all priced by the same evaluator (the solve starts from the
    baselines, and from ``starts`` if given).

    Raises
    ------
    TorchPlanError: the model cannot be traced, the mesh is not one, or no
        assignment fits ``memory`` (the message gives the smallest peak).
    """
    import maxshard

    traced = trace(
        model, args, mesh=mesh, memory=memory, loss=loss, optimizer_states=optimizer_states
    )
    inst = traced.instance
    smallest = evaluate(inst, all_min_usage(inst)).peak
    if inst.usage_limit is not None and smallest > inst.usage_limit:
        raise TorchPlanError(
            f"no plan fits {_bytes(inst.usage_limit)} per device: the smallest peak any plan "
            f"reaches is {_bytes(smallest)} ({smallest} bytes)"
        )
    assignments = baselines(traced, model)  # the solve starts from them too
    starts = [*solve_options.pop("starts", ()), *assignments.values()]
    started = time.monotonic()  # the descent's seconds are the solve's
    starts += _descended(inst, list(assignments.values()))
    timeout_left = max(0.0, timeout - (time.monotonic() - started))
    result = maxshard.solve(inst, timeout=timeout_left, log=log, starts=starts, **solve_options)
    if result.solution is None:
        raise TorchPlanError(f"maxshard found no plan in {timeout} s ({result.status})")
    costed = {label: price(traced, sol) for label, sol in assignments.items()}
    solution, method = np.asarray(result.solution), f"maxshard ({result.method})"
    best = price(traced, solution)
    for label, c in costed.items():
        if c.fits and not c.forbidden and (c.cost, label) < (best.cost, "~"):
            solution, best, method = assignments[label], c, f"the {label} baseline"
    return ShardingPlan(
        traced=traced,
        solution=[int(s) for s in solution],
        cost=best.cost,
        peak_memory=best.peak_memory,
        placements={
            name: traced.placements(k, int(solution[k])) for name, k in traced.params.items()
        },
        ops=read_back(traced, solution),
        baselines=costed,
        costed=best,
        method=method,
        lower_bound=result.lower_bound,
        solve_seconds=result.time_s,
        result=result,
        deterministic=result.deterministic,
    )


def price(traced: Traced, solution: np.ndarray) -> Costed:
    inst = traced.instance
    ev = evaluate(inst, solution)
    compute = int(inst.cost[inst.strat_off[:-1] + solution].sum())
    return Costed(cost=ev.cost, compute=compute, communication=ev.cost - compute,
                  peak_memory=ev.peak,
                  fits=ev.feasible, forbidden=ev.forbidden)  # fmt: skip


def read_back(traced: Traced, solution: np.ndarray) -> list[OpPlacement]:
    """Each node's output placement and the moves its inputs need."""
    index = {node: k for k, node in enumerate(traced.nodes)}
    out = []
    for k, node in enumerate(traced.nodes):
        spec = traced.menus[k].strategies[int(solution[k])]
        moves = []
        if node.op == "call_function":
            producers = [index[a] for a in inputs_of(node) if a in index]
            for p, want in zip(producers, spec.input_specs or (), strict=False):
                have = _element(traced, p, int(solution[p]), node)
                if have != tuple(want.placements):
                    moves.append(Redistribution(traced.nodes[p].name, have, tuple(want.placements)))
        op = "input" if node.op == "placeholder" else str(node.target)
        out.append(OpPlacement(node.name, op, traced.placements(k, int(solution[k])), tuple(moves)))
    return out


def _element(traced: Traced, p: int, s: int, consumer: torch.fx.Node) -> tuple:
    """The placement of what ``consumer`` reads from producer ``p``."""
    from .strategies import output_specs

    outs = output_specs(traced.menus[p].strategies[s])
    if len(outs) > 1 and consumer.target is operator.getitem:
        return tuple(outs[consumer.args[1]].placements)
    return traced.placements(p, s)


def _time(ns: int | None) -> str:
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.1f} {unit}"
    return f"{ns} ns"


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
