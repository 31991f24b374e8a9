"""The fast Lagrangian rounds (search/dive.py) and the loop's dive through them."""

import itertools
import time

import numpy as np
import pytest

from maxshard.backend import Context
from maxshard.backends.lagrange import Lagrange, Standing
from maxshard.evaluate import evaluate
from maxshard.search.dive import Rounding
from maxshard.search.local import Search
from maxshard.search.multipliers import Multipliers

from .conftest import Recorder, brute_force, generated, reduced


def model_for(tmp_path, seed, **kw):
    inst = generated(tmp_path, seed, **kw)
    return inst, reduced(inst)


def priced_optimum(model, pen):
    """The least cost plus penalties over every assignment, memory ignored."""
    return min(
        model.cost(x) + float(pen[model.dom_off[:-1] + x].sum())
        for x in map(np.array, itertools.product(*(range(d) for d in model.dom_size)))
    )


@pytest.mark.parametrize("seed", range(6))
def test_rounding_bounds_the_priced_problem_and_descends_its_solution(tmp_path, seed):
    _, model = model_for(tmp_path, seed, nodes=8, forbidden=0.0, functional=0.0, tightness=0.2)
    if not model.nv:
        pytest.fail("precondition failed: presolve solved it")
    rng = np.random.default_rng(seed)
    prices = Multipliers(model)
    rounding = Rounding(model, prices.diffusion, seed)
    for scale in (0.0, 1.0, 10.0):
        pen = scale * rng.random(int(model.dom_off[-1])) * float(np.abs(model.unary).max() + 1)
        x, value = rounding.solve(pen)
        optimum = priced_optimum(model, pen)
        assert value is not None and value <= optimum + 1e-6 * max(1.0, abs(optimum))
        priced = model.cost(x) + float(pen[model.dom_off[:-1] + x].sum())
        assert priced >= optimum - 1e-6 * max(1.0, abs(optimum))
        # a descent's end: no single variable can lower the priced cost
        for v in range(model.nv):
            for a in range(int(model.dom_size[v])):
                y = x.copy()
                y[v] = a
                assert model.cost(y) + float(pen[model.dom_off[:-1] + y].sum()) >= priced - 1e-6


def small_priced(tmp_path, seed: int):
    """A small model with memory (tighter or looser by seed), its brute-force
    optimum, and a search at its least-usage assignment."""
    tight = (0.0, 0.1, 0.3, 0.6)[seed % 4]
    inst, model = model_for(tmp_path, seed, nodes=8, forbidden=0.0, functional=0.0, tightness=tight)
    best, _ = brute_force(inst)
    if model.limit is None or not len(model.base):
        pytest.fail("precondition failed: no memory left to price")
    search = Search(model, seed)
    search.reset(model.min_usage_solution())
    return inst, model, best, search


@pytest.mark.parametrize("seed", range(8))
def test_a_dive_reports_fitting_answers_and_bounds_below_the_optimum(tmp_path, seed):
    inst, model, best, search = small_priced(tmp_path, seed)
    record = Recorder()
    standing = Standing(model, model.min_usage_solution(), record)
    Lagrange().dive(model, Multipliers(model), search, standing, time.monotonic() + 0.3)
    bounds, x, cost = record.bounds, standing.x, standing.cost
    assert bounds and all(b <= best for b in bounds)
    assert cost == model.cost(x) and model.fits(x) and cost >= best
    for y in record.solutions:
        ev = evaluate(inst, model.reconstruct(y))
        assert ev.feasible and ev.cost == model.cost(y)


@pytest.mark.parametrize("seed", range(8))
def test_a_dive_that_ends_climbing_the_ascent_bounds_below_the_optimum(tmp_path, seed):
    """The last ``climb`` seconds of a dive climb the dual ascent from the
    messages of its best-bounding round: it reports bounds there, each at most
    the brute-force optimum."""
    inst, model, best, search = small_priced(tmp_path, seed)
    bounds = []  # every bound the dive offers its standing, and when

    end = time.monotonic() + 0.4
    prices = Multipliers(model)
    steps = []  # the ascent's steps: when, and what each proved
    real_step = prices.ascent.step
    prices.ascent.step = lambda until: (steps.append(time.monotonic()), real_step(until))[1]

    class Unproved(Standing):
        """Keeps every bound offered, and never counts one as a proof (a
        proof would end the dive before its climb)."""

        def raise_bound(self, bound):
            bounds.append((time.monotonic(), bound))
            return False

    Lagrange().dive(model, prices, search, Unproved(model, search.x.copy(), Recorder()), end, 0.2)
    assert steps and min(steps) >= end - 0.2, "the ascent climbs in the last 0.2 s only"
    assert [t for t, _ in bounds if t >= min(steps)], "and its bounds are reported"
    assert all(b is None or b <= best for _, b in bounds)


def test_a_short_run_dives_to_the_end_and_a_long_one_first(tmp_path, monkeypatch):
    """With at most ``dive_all`` seconds the multiplier loop dives all its time
    (no toulbar2 round); with more it dives ``dive_max`` seconds, then runs its
    toulbar2 rounds; a copy restarted from a leader's prices does not dive."""
    from maxshard.backends import lagrange

    inst, model = model_for(
        tmp_path, 3, nodes=150, max_strategies=5, forbidden=0.0, functional=0.0, tightness=0.15
    )
    relaxed = []  # when each toulbar2 round started
    real = lagrange.solve_penalised

    def spy(*args, **kw):
        relaxed.append(time.monotonic())
        return real(*args, **kw)

    monkeypatch.setattr(lagrange, "solve_penalised", spy)
    monkeypatch.setattr(Lagrange, "relax_seconds", 1)
    dives = []
    real_dive = Lagrange.dive
    monkeypatch.setattr(Lagrange, "dive", lambda *a: (dives.append(1), real_dive(*a))[1])
    record = Recorder()
    Lagrange().solve(model, time.monotonic() + 3, None, record, 0)
    assert dives and not relaxed and record.solutions and record.bounds
    assert all(evaluate(inst, model.reconstruct(x)).feasible for x in record.solutions)

    dives.clear()
    monkeypatch.setattr(Lagrange, "dive_all", 2.0)
    monkeypatch.setattr(Lagrange, "dive_max", 1.0)
    start = time.monotonic()
    Lagrange().solve(model, start + 5, None, Recorder(), 0)
    assert dives and relaxed and relaxed[0] - start >= 1.0

    dives.clear()
    leader = Lagrange().prices(model, model.cost(model.min_usage_solution())).state()
    report = Context(Recorder(), inherited=leader)  # what a copy restarted at the switch gets
    start = time.monotonic()
    Lagrange().solve(model, start + 5, None, report, 0)
    assert not dives and relaxed[-1] >= start


def test_only_the_original_loops_dive_of_8_to_20_s_to_the_deadline_climbs(tmp_path, monkeypatch):
    """The climb takes a share of a dive whose span is within
    ``dive_climb_spans``; a copy restarted from a leader's prices dives without."""
    inst, model = model_for(tmp_path, 3, nodes=30, forbidden=0.0, functional=0.0, tightness=0.15)
    climbs = []
    real_dive = Lagrange.dive
    monkeypatch.setattr(Lagrange, "dive", lambda *a: (climbs.append(a[-1]), real_dive(*a))[1])
    Lagrange().solve(model, time.monotonic() + 1.0, None, Recorder(), 0)
    monkeypatch.setattr(Lagrange, "dive_climb_spans", (0.5, 20.0))
    Lagrange().solve(model, time.monotonic() + 1.0, None, Recorder(), 0)
    leader = Lagrange().prices(model, model.cost(model.min_usage_solution())).state()
    Lagrange().solve(model, time.monotonic() + 1.0, None, Context(Recorder(), inherited=leader), 0)
    assert climbs[0] == 0.0  # a 1 s dive is shorter than 8 s
    assert 0.1 < climbs[1] <= 0.2  # a fifth of it
    assert climbs[2] == 0.0  # a copy
