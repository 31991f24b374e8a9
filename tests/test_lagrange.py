import time

import numpy as np
import pytest

from maxshard.ascent import Ascent
from maxshard.backend import Context
from maxshard.backends.lagrange import Lagrange, TermLagrange
from maxshard.evaluate import evaluate
from maxshard.instance import FORBIDDEN
from maxshard.model import penalties, segment_argmin, term_penalties
from maxshard.search.local import Search
from maxshard.search.multipliers import TermWeights, relax, solve_penalised, whole

from .conftest import Recorder, generated, reduced


@pytest.fixture
def toulbar2_rounds(monkeypatch):
    """The multiplier loop without its dive (see test_dive.py): the tests using
    it are about the toulbar2 rounds, which a short run would skip."""
    monkeypatch.setattr(Lagrange, "dive_all", 0.0)
    monkeypatch.setattr(Lagrange, "dive_max", 0.0)


def model_for(tmp_path, seed, **kw):
    inst = generated(tmp_path, seed, **kw)
    return inst, reduced(inst)


def direct_sum(model, weight):
    """Per value, term by term: usage times the term's weight."""
    total = np.zeros(int(model.dom_off[-1]))
    for k in range(len(model.term_var)):
        v = model.term_var[k]
        total[model.dom_off[v] : model.dom_off[v + 1]] += model.usage_of(k) * weight[k]
    return total


@pytest.mark.parametrize("seed", range(3))
def test_segment_argmin_is_each_segments_first_smallest(seed):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 6, 200)
    off = np.concatenate([[0], np.cumsum(lens)])
    values = rng.integers(0, 3, int(off[-1])).astype(np.float64)  # many ties
    values[rng.random(len(values)) < 0.2] = np.inf
    want = [int(np.argmin(values[a:b])) for a, b in zip(off[:-1], off[1:], strict=True)]
    assert segment_argmin(values, off).tolist() == want
    values[off[3] : off[4]] = np.nan  # NaN only in one segment: its first value
    assert segment_argmin(values, off)[3] == 0
    assert len(segment_argmin(values[:0], off[:1])) == 0


def test_penalties_match_a_direct_sum(tmp_path):
    _, model = model_for(tmp_path, 1, nodes=40, max_strategies=4, forbidden=0.0, tightness=0.1)
    lam = np.random.default_rng(0).random(len(model.base))
    span = [lam[lo:hi].sum() for lo, hi in zip(model.term_lo, model.term_hi, strict=True)]
    assert np.allclose(penalties(model, lam), direct_sum(model, span))


def test_term_penalties_match_a_direct_sum(tmp_path):
    _, model = model_for(tmp_path, 2, nodes=40, max_strategies=4, forbidden=0.0, tightness=0.1)
    w = np.random.default_rng(1).random(len(model.term_var))
    assert np.allclose(term_penalties(model, w), direct_sum(model, w))


def max_usage_solution(model):
    return segment_argmin(-direct_sum(model, np.ones(len(model.term_var))), model.dom_off)


@pytest.mark.parametrize("seed", range(3))
def test_term_weights_bracket_each_term(tmp_path, seed):
    _, model = model_for(tmp_path, seed, nodes=60, max_strategies=4, forbidden=0.0, tightness=0.1)
    fits, overflows = model.min_usage_solution(), max_usage_solution(model)
    over = np.concatenate([[0], np.cumsum(model.load(overflows) > model.limit)])
    broken = over[model.term_hi] > over[model.term_lo]
    if not broken.any() or broken.all():
        pytest.fail("precondition failed: needs some terms broken and some not")
    weights = TermWeights(model, start=1.0)
    weights.update(fits, 0)  # nothing broken: every weight falls, bracket [0, 1]
    assert np.allclose(weights.w, 1 / weights.descent)
    weights.update(overflows, 0)
    # a broken term rises to the middle of [its weight, its stale upper end * 1.35]
    low = 1 / weights.descent
    assert np.allclose(weights.w[broken], (low + 1.35) / 2)
    # a fitting one keeps falling while it has never broken
    assert np.allclose(weights.w[~broken], low / weights.descent)
    weights.update(fits, 0)  # now fitting: back to the middle of [low / 1.5, previous]
    assert np.allclose(weights.w[broken], (low / 1.5 + (low + 1.35) / 2) / 2)
    assert (weights.penalties() >= 0).all()


def test_term_weights_start_at_the_cost_per_unit_of_the_limit(tmp_path):
    """The term-priced loop's weights start where its first solution's cost
    would buy the whole limit (not at 1 in the model's cost unit); a first
    solution with a forbidden pick, or free, gives no scale."""
    _, model = model_for(tmp_path, 0, nodes=60, max_strategies=4, forbidden=0.0, tightness=0.1)
    cost = model.cost(model.min_usage_solution())
    assert model.limit and cost
    assert np.allclose(TermLagrange().prices(model, cost).w, cost / model.limit)
    assert np.allclose(TermLagrange().prices(model, 1000 * cost).w, 1000 * cost / model.limit)
    assert np.allclose(TermLagrange().prices(model, FORBIDDEN).w, 1.0)
    assert np.allclose(TermLagrange().prices(model, 0).w, 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_repair_restores_memory_feasibility(tmp_path, seed):
    _, model = model_for(tmp_path, seed, nodes=80, max_strategies=4, forbidden=0.0, tightness=0.1)
    x, _ = relax(model, np.zeros(len(model.base)), 2, seed)  # ignores memory
    if x is None:
        pytest.fail("precondition failed: no assignment without forbidden costs")
    search = Search(model, seed)
    search.reset(x)
    assert search.repair(time.monotonic() + 10)
    assert model.fits(search.x)
    assert np.array_equal(search.load, model.load(search.x))


@pytest.mark.wallclock
@pytest.mark.parametrize(("backend", "seed"), [(Lagrange, 0), (Lagrange, 1), (TermLagrange, 2)])
def test_lagrange_reports_only_fitting_solutions_in_time(tmp_path, backend, seed):
    inst, model = model_for(
        tmp_path, seed, nodes=150, max_strategies=5, forbidden=0.0, functional=0.0, tightness=0.15
    )
    record = Recorder()
    start = time.monotonic()
    seconds = 6 if backend is Lagrange else 9  # time for rounds of its 6 s relaxed solves
    result = backend().solve(model, start + seconds, None, record, seed)
    assert time.monotonic() - start < seconds + 1
    assert record.solutions
    for x in [*record.solutions, result.solution]:
        ev = evaluate(inst, model.reconstruct(x))
        assert ev.feasible and ev.cost == model.cost(x)
    costs = [model.cost(x) for x in record.solutions]
    assert costs == sorted(costs, reverse=True)  # each report improves on the last
    # bounds stream as found (both loops bound), each better than the last
    assert record.bounds and record.bounds == sorted(set(record.bounds))
    assert all(b <= costs[-1] for b in record.bounds)
    assert result.lower_bound == max(record.bounds)


class Handover(Context):
    """A context that keeps what a loop reports and the states it hands over,
    and gives it ``inherited``, ``previous`` and ``peers``."""

    def __init__(self, inherited=None, previous=None, peers=frozenset()) -> None:
        self.found = Recorder()
        super().__init__(self.found, inherited=inherited, previous=previous, peers=peers)
        self.solutions, self.bounds, self.states = self.found.solutions, self.found.bounds, []

    def hand_over(self, state) -> None:
        self.states.append(state)


@pytest.mark.parametrize("backend", [Lagrange, TermLagrange])
def test_a_restarted_loop_goes_on_from_the_prices_it_inherits(
    tmp_path, monkeypatch, toulbar2_rounds, backend
):
    from maxshard.backends import lagrange

    _, model = model_for(
        tmp_path, 3, nodes=150, max_strategies=5, forbidden=0.0, functional=0.0, tightness=0.15
    )
    monkeypatch.setattr(backend, "relax_seconds", 1)  # rounds fit in a short test
    first = Handover()
    backend().solve(model, time.monotonic() + 4, None, first, 0)
    assert first.states  # shared after every round
    leader = first.states[-1]
    priced = []  # the penalties of each relaxed solve
    real = lagrange.solve_penalised
    monkeypatch.setattr(
        lagrange, "solve_penalised", lambda m, pen, *a: (priced.append(pen), real(m, pen, *a))[1]
    )
    backend().solve(model, time.monotonic() + 3, None, Handover(leader), 1)
    prices = backend().prices(model, model.cost(model.min_usage_solution()))
    cold = lagrange.whole(prices.penalties())
    prices.restore(leader)
    warm = lagrange.whole(prices.penalties())
    assert not np.array_equal(cold, warm)  # the leader's prices moved away from the start
    assert np.array_equal(priced[0], warm)


def test_a_loop_restarted_as_the_other_goes_on_with_its_own_ascent(
    tmp_path, monkeypatch, toulbar2_rounds
):
    """At the leader switch the term-priced loop restarts as the multipliers (or
    back): it takes the leader's prices but keeps its own climbed bound."""
    _, model = model_for(
        tmp_path, 3, nodes=150, max_strategies=5, forbidden=0.0, functional=0.0, tightness=0.15
    )
    for backend in (Lagrange, TermLagrange):
        monkeypatch.setattr(backend, "relax_seconds", 1)
    first = Handover()
    TermLagrange().solve(model, time.monotonic() + 4, None, first, 0)
    assert first.bounds and "ascent" in first.states[-1]
    climbed = max(first.bounds)  # the term weights bound by the ascent alone
    restored = []
    real = Ascent.restore
    monkeypatch.setattr(Ascent, "restore", lambda a, st: (restored.append(st), real(a, st))[1])
    carried = Handover(previous=first.states[-1])
    Lagrange().solve(model, time.monotonic() + 2.5, None, carried, 1)
    # its ascent went on from the carried messages and multipliers, not from zero
    assert len(restored) == 1 and restored[0] is first.states[-1]["ascent"]
    assert carried.bounds[0] >= climbed - 2


def test_loops_leave_the_ascent_to_a_worker_that_climbs_it(tmp_path, monkeypatch, toulbar2_rounds):
    """With a peer that provides the ascent (``--prove``'s dual worker) neither loop steps an
    ascent of its own; the multipliers still bound (diffusion, the relaxed
    solves), the term weights then bound nothing. Without it both climb."""
    inst, model = model_for(
        tmp_path, 3, nodes=150, max_strategies=5, forbidden=0.0, functional=0.0, tightness=0.15
    )
    steps = []
    real = Ascent.step
    monkeypatch.setattr(Ascent, "step", lambda a, end: (steps.append(a), real(a, end))[1])
    for backend in (Lagrange, TermLagrange):
        monkeypatch.setattr(backend, "relax_seconds", 1)
    for backend, bounds in ((Lagrange, True), (TermLagrange, False)):
        report = Handover(peers=frozenset({"ascent"}))
        backend().solve(model, time.monotonic() + 4, None, report, 0)
        assert not steps and bool(report.bounds) == bounds
        assert report.solutions and all(model.fits(x) for x in report.solutions)
        assert all(b <= model.cost(report.solutions[-1]) for b in report.bounds)
        backend().solve(model, time.monotonic() + 4, None, Handover(), 0)
        assert steps  # on its own, the loop climbs it
        steps.clear()


def test_a_relaxed_solve_may_run_longer_until_it_finds_a_solution_but_not_past_the_deadline(
    tmp_path, monkeypatch, toulbar2_rounds
):
    from maxshard.backends import lagrange

    _, model = model_for(
        tmp_path, 3, nodes=150, max_strategies=5, forbidden=0.0, functional=0.0, tightness=0.15
    )
    monkeypatch.setattr(Lagrange, "relax_seconds", 2)
    calls = []  # (time left, seconds, grace) of each relaxed solve
    real = lagrange.solve_penalised

    def spy(m, pen, seconds, seed, light=False, grace=0):
        calls.append((deadline - time.monotonic(), seconds, grace))
        return real(m, pen, seconds, seed, light, grace)

    monkeypatch.setattr(lagrange, "solve_penalised", spy)
    deadline = time.monotonic() + 9
    Lagrange().solve(model, deadline, None, Recorder(), 0)
    assert calls[0][2] == calls[0][1]  # early on: up to twice the time
    assert all(seconds + grace < left for left, seconds, grace in calls)
    assert any(grace < seconds for _, seconds, grace in calls)  # the last, near the deadline


@pytest.mark.parametrize("seed", range(8))
def test_lagrangian_bound_never_exceeds_the_optimum(tmp_path, seed):
    from .conftest import brute_force

    inst, model = model_for(tmp_path, seed, nodes=7, forbidden=0.0, functional=0.0, tightness=0.1)
    best, _ = brute_force(inst)
    rng = np.random.default_rng(seed)
    for scale in (0.0, 0.5, 2.0, 10.0):
        lam = scale * rng.random(len(model.base))
        _, bound = relax(model, lam, 5, seed)
        assert bound is not None  # tiny problems are always solved to optimality
        assert bound <= best


@pytest.mark.parametrize("seed", range(8))
def test_each_loops_bound_round_never_exceeds_the_optimum(tmp_path, seed):
    """Multipliers (diffusion for their own values, and toulbar2's bound on the
    relaxed solve) and term weights (the dual ascent): over rounds with prices
    moved as the loop moves them, every bound is at most the brute-force optimum."""
    from .conftest import brute_force

    tight = (0.0, 0.1, 0.3, 0.6)[seed % 4]
    inst, model = model_for(tmp_path, seed, nodes=8, forbidden=0.0, functional=0.0, tightness=tight)
    best, _ = brute_force(inst)
    if model.limit is None or not len(model.base):
        pytest.fail("precondition failed: no memory left to price")
    cost = model.cost(model.min_usage_solution())
    for prices in (Lagrange().prices(model, cost), TermLagrange().prices(model, cost)):
        found = []
        for round_ in range(4):
            raw = prices.penalties()
            x_r, relaxed = solve_penalised(model, whole(raw), 5, seed + round_)
            found.append(prices.bound(raw, relaxed, time.monotonic() + 0.1))
            prices.update(x_r, best)
        assert all(b is not None and b <= best for b in found), (type(prices).__name__, found)


@pytest.mark.parametrize("seed", range(4))
def test_a_cut_short_relaxed_solve_still_bounds_the_optimum(tmp_path, monkeypatch, seed):
    """When toulbar2 stops before proving, the bound comes from its search's
    global lower bound, in toulbar2's units (no model offset): still below the optimum."""
    from maxshard.search import toulbar2

    from .conftest import brute_force

    inst, model = model_for(tmp_path, seed, nodes=7, forbidden=0.0, functional=0.0, tightness=0.1)
    best, _ = brute_force(inst)
    rng = np.random.default_rng(seed)
    multipliers = [scale * rng.random(len(model.base)) for scale in (0.0, 0.5, 2.0)]
    proved = [relax(model, lam, 5, seed)[1] for lam in multipliers]
    real_run = toulbar2.run
    monkeypatch.setattr(toulbar2, "run", lambda *a, **k: (False, real_run(*a, **k)[1]))
    for lam, exact in zip(multipliers, proved, strict=True):
        _, bound = relax(model, lam, 5, seed)
        assert bound is not None and bound <= best
        # the search did finish: its global bound is the optimum, in the same units
        assert bound == exact


def test_a_search_cut_short_proves_nothing():
    from maxshard.search.toulbar2 import PROVED_EMPTY, PROVED_OPTIMAL, _forward

    cut_short = [
        "Time limit expired... Aborting...\n",
        "Dual bound: 5\n",
        "No solution found in 0 backtracks and 103 nodes.\n",
    ]
    assert _forward(cut_short, 3, lambda x: None) == 0
    assert _forward(["No solution in 12 backtracks.\n"], 3, lambda x: None) == PROVED_EMPTY
    found = []
    lines = ["New solution: 7 (1 backtracks)\n", " 0 2 1\n", "Optimum: 7 in 3 backtracks\n"]
    assert _forward(lines, 3, found.append) == PROVED_OPTIMAL
    assert [x.tolist() for x in found] == [[0, 2, 1]]


@pytest.mark.wallclock
def test_a_search_given_grace_still_stops_at_its_time_once_it_has_a_solution(tmp_path):
    """With ``grace``, toulbar2 may go on past ``seconds`` only while it has found
    nothing: a search that finds solutions at once but cannot finish (a random
    500-variable network) ends after ``seconds``, stopped by the reader with
    toulbar2's own time-out signal; a late stray signal does no harm."""
    import os
    import signal

    from maxshard.search import toulbar2

    inst = generated(
        tmp_path, 1, nodes=600, edges=2400, max_strategies=6, forbidden=0.0, functional=0.0
    )
    model = reduced(inst)
    cfn = toulbar2.build(model, model.unary, 0, None, memory=False)
    start = time.monotonic()
    proved, x = toulbar2.run(cfn, model.nv, 1, lambda _x: None, grace=8)
    assert time.monotonic() - start < 4  # not the 9 s toulbar2's own timer allows
    assert not proved and x is not None and len(x) == model.nv
    os.kill(os.getpid(), signal.SIGVTALRM)  # as if the reader signalled just after the end
    time.sleep(0.05)  # still alive: the signal is ignored once the search is over


@pytest.mark.wallclock
def test_a_search_of_seconds_with_a_fraction_takes_the_fraction(tmp_path):
    """toulbar2's own limit counts whole seconds: a search given 1.6 s that
    cannot finish (the random network above) runs 1.6 s on the clock, neither
    the 1 s its limit would round down to nor the 2 it is given instead."""
    from maxshard.search import toulbar2

    inst = generated(
        tmp_path, 1, nodes=600, edges=2400, max_strategies=6, forbidden=0.0, functional=0.0
    )
    model = reduced(inst)
    cfn = toulbar2.build(model, model.unary, 0, None, memory=False)
    start = time.monotonic()
    proved, x = toulbar2.run(cfn, model.nv, 1.6, lambda _x: None)
    took = time.monotonic() - start
    assert 1.5 <= took < 1.9
    assert not proved and x is not None and len(x) == model.nv


def test_toulbar2_runs_with_a_deep_stack(tmp_path):
    """Its search recursion outgrows the usual 8 MiB stack on large models (a
    worker died of it on two copies of U): each relaxed solve raises the limit."""
    import resource

    from maxshard.backends import lagrange
    from maxshard.search import toulbar2

    _, model = model_for(tmp_path, 0, nodes=30, forbidden=0.0, functional=0.0, tightness=0.1)
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if hard != resource.RLIM_INFINITY and hard <= 8 << 20:
        pytest.skip("the hard stack limit leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, hard))
    try:
        pen = np.zeros(int(model.dom_off[-1]), dtype=np.int64)
        x, _ = lagrange.solve_penalised(model, pen, 2, 0)
        assert x is not None
        raised = resource.getrlimit(resource.RLIMIT_STACK)[0]
        want = toulbar2.STACK_BYTES if hard == resource.RLIM_INFINITY else hard
        assert raised == resource.RLIM_INFINITY or raised >= min(want, toulbar2.STACK_BYTES)
    finally:
        resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))


def test_without_memory_the_loop_rounds_the_diffusion_and_proves_the_optimum(tmp_path):
    """No memory limit: the loop's free rounds (diffusion, rounding, descent)
    report answers the evaluator confirms and bounds at most the brute-force
    optimum, and claim an optimum only at it; on these instances (fixed seeds,
    not presolved: presolve alone solves such small ones) they prove it."""
    from dataclasses import replace

    from maxshard.backend import Status
    from maxshard.reduce import reduce

    from .conftest import brute_force

    proved = 0
    for seed in (0, 1, 2, 3):
        generated_inst = generated(tmp_path, seed, nodes=9, forbidden=0.0, functional=0.0)
        inst = replace(generated_inst, usage_limit=None)
        best, _ = brute_force(inst)
        model = reduce(inst, passes=False)
        assert model.limit is None and model.nv == 9
        record = Recorder()
        result = Lagrange().solve(model, time.monotonic() + 1.0, None, record, seed)
        assert record.solutions and all(b <= best for b in record.bounds)
        for y in record.solutions:
            ev = evaluate(inst, model.reconstruct(y))
            assert ev.clean and ev.cost == model.cost(y)
        cost = model.cost(result.solution)
        assert cost >= best
        if result.status is Status.OPTIMAL:
            assert cost == best == result.lower_bound
            proved += 1
    assert proved == 4
