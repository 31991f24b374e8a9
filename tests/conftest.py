"""Shared helpers: instance files, brute force, paths to the shared benchmarks."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from maxshard.evaluate import evaluate
from maxshard.generate import generate
from maxshard.instance import Instance
from maxshard.model import Model
from maxshard.reader import read_instance
from maxshard.reduce import Infeasible, reduce

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
EXAMPLE = BENCHMARKS / "example.json"


def write_problem(path: Path, problem: dict) -> Path:
    path.write_text(json.dumps(problem))
    return path


def generated(tmp_path: Path, seed: int, **kw) -> Instance:
    return read_instance(write_problem(tmp_path / f"g{seed}.json", generate(seed=seed, **kw)))


def reduced(inst: Instance) -> Model:
    """The presolved model of a fixed instance that must have a feasible solution
    (the test's precondition: a failure, never a skip, when it does not)."""
    try:
        return reduce(inst)
    except Infeasible:
        pytest.fail("precondition: the fixed instance must have a feasible solution")


def brute_force(inst: Instance) -> tuple[int | None, list[int] | None]:
    """Cheapest memory-feasible solution without forbidden picks (None, None if none)."""
    best_cost, best = None, None
    for sol in itertools.product(*(range(k) for k in inst.n_strategies)):
        ev = evaluate(inst, np.array(sol))
        if ev.clean and (best_cost is None or ev.cost < best_cost):
            best_cost, best = ev.cost, list(sol)
    return best_cost, best


def contest_optimum(inst: Instance) -> tuple[int, int] | None:
    """(forbidden picks, cost) of the contest's optimum: of the solutions that fit
    in memory, the fewest forbidden picks, then the least cost; None if none fits."""
    found = None
    for sol in itertools.product(*(range(k) for k in inst.n_strategies)):
        ev = evaluate(inst, np.array(sol))
        if ev.feasible and (found is None or (ev.forbidden, ev.cost) < found):
            found = (ev.forbidden, ev.cost)
    return found


class Recorder:
    """A backend's ``report`` callback that keeps what it was given."""

    def __init__(self) -> None:
        self.solutions: list[np.ndarray] = []
        self.bounds: list[int] = []

    def __call__(self, solution=None, lower_bound=None) -> None:
        if solution is not None:
            self.solutions.append(solution)
        if lower_bound is not None:
            self.bounds.append(lower_bound)


@pytest.fixture
def example() -> Instance:
    return read_instance(EXAMPLE)


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """Compile the local search's kernels before any timed test (cached on disk
    after the first run; the benchmark tool reports the cold-start cost)."""
    from maxshard.search.local import warm_up

    warm_up()


@pytest.fixture
def fake_plugins(monkeypatch):
    """The misbehaving and cooperating backends of :mod:`tests.fakes`, installed."""
    from importlib.metadata import EntryPoint

    from maxshard import registry
    from maxshard.backend import GROUP

    from .fakes import FAKES

    real = registry.available()
    fakes = {name: EntryPoint(name, target, GROUP) for name, target in FAKES.items()}
    fakes["missing"] = EntryPoint("missing", "no_such_module_xyz:Backend", GROUP)
    monkeypatch.setattr(registry, "available", lambda: {**real, **fakes})
