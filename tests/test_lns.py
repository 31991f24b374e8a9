import time

import numpy as np
import pytest

from maxshard.backends import lns
from maxshard.backends.lns import LNS, Graph, Room
from maxshard.evaluate import evaluate

from .conftest import brute_force, generated, reduced_or_skip


@pytest.mark.parametrize("seed", range(8))
def test_room_overflows_exactly_where_memory_does(tmp_path, seed):
    """For a free set and any values of it, the knapsacks (every row, also
    those left for later) are overflowed exactly when the whole solution no
    longer fits; the rows dropped as unable to overflow never are."""
    inst = generated(tmp_path, seed, nodes=40, max_strategies=4, tightness=0.1)
    model = reduced_or_skip(inst)
    if model.limit is None or not len(model.base):
        pytest.skip("no memory constraint left after presolve")
    rng = np.random.default_rng(seed)
    x = model.min_usage_solution()
    if not model.fits(x):
        pytest.skip("nothing fits")
    graph = Graph(model)
    outcomes = set()
    for _ in range(20):
        free = np.sort(rng.choice(model.nv, min(model.nv, 8), replace=False))
        room = Room(model, graph, x, model.load(x), free)
        for _ in range(20):
            y = rng.integers(0, model.dom_size[free])
            trial = x.copy()
            trial[free] = y
            fits = model.fits(trial)
            assert (len(room.overflowed(y)) > 0) == (not fits)
            outcomes.add(fits)
    assert outcomes == {True, False}  # both cases met


@pytest.mark.parametrize("tightest", [0, 16])
@pytest.mark.parametrize("seed", range(3))
def test_lns_freeing_everything_finds_the_optimum(tmp_path, monkeypatch, seed, tightest):
    """With a neighbourhood as large as the model, one solve is exact; with no
    knapsack posted up front, every one needed must come lazily."""
    monkeypatch.setattr(lns, "TIGHTEST", tightest)
    inst = generated(tmp_path, seed, nodes=7, forbidden=0.0, tightness=0.4)
    best, _ = brute_force(inst)
    if best is None:
        pytest.skip("no clean solution fits")
    model = reduced_or_skip(inst)
    backend = LNS()
    backend.size = backend.smallest = model.nv
    reports = []
    result = backend.solve(model, time.monotonic() + 2.5, None, reports.append, seed)
    for x in [*reports, result.solution]:
        assert evaluate(inst, model.reconstruct(x)).feasible
    assert evaluate(inst, model.reconstruct(result.solution)).cost == best


@pytest.mark.parametrize("seed", range(4))
def test_lns_reports_fitting_solutions_each_cheaper_than_the_last(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=200, max_strategies=5, tightness=0.3)
    model = reduced_or_skip(inst)
    start = model.min_usage_solution()
    reports = []
    result = LNS().solve(model, time.monotonic() + 2.5, start, reports.append, seed)
    costs = [model.cost(x) for x in reports]
    assert reports and costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)
    assert costs[-1] < model.cost(start)  # min-usage is far from the optimum here
    for x in [*reports, result.solution]:
        ev = evaluate(inst, model.reconstruct(x))
        assert ev.feasible and model.fits(x)


def test_lns_adopts_a_better_solution_from_another_worker(tmp_path):
    inst = generated(tmp_path, 5, nodes=400, max_strategies=4, tightness=0.3)
    model = reduced_or_skip(inst)
    from maxshard.backends.local import LocalSearch

    better = LocalSearch().solve(model, time.monotonic() + 0.5, None, lambda x: None, 0).solution
    start = model.min_usage_solution()
    assert model.cost(better) < model.cost(start)

    class Report:
        given = False

        def __call__(self, solution=None, lower_bound=None):
            pass

        def best(self):  # the orchestrator's shared best, offered once
            if self.given:
                return None
            self.given = True
            return better

    result = LNS().solve(model, time.monotonic() + 1.6, start, Report(), 0)
    assert model.cost(result.solution) <= model.cost(better)
