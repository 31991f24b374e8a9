"""The compiled local-search kernels against direct numpy computations."""

import time

import numpy as np
import pytest

from maxshard.reader import read_instance
from maxshard.reduce import reduce
from maxshard.search.local import Search

from .conftest import generated, reduced, write_problem


def search_for(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=60, max_strategies=5, forbidden=0.05, tightness=0.2)
    model = reduced(inst)
    if model.nv < 3:
        pytest.fail("precondition failed: presolve left too little to search")
    return model, Search(model, seed)


def reference_options(model, x, load, limit, v):
    cost = model.unary_of(v).astype(np.float64)
    for e in range(model.m):
        if model.edge_u[e] == v:
            cost = cost + model.table(e)[:, x[model.edge_v[e]]]
        elif model.edge_v[e] == v:
            cost = cost + model.table(e)[x[model.edge_u[e]], :]
    ok = np.ones(len(cost), dtype=bool)
    for k in np.flatnonzero(model.term_var == v):
        lo, hi = model.term_lo[k], model.term_hi[k]
        use = model.usage_of(k)
        ok &= use - use[x[v]] <= limit - load[lo:hi].max()
    return cost, ok


@pytest.mark.parametrize("seed", range(6))
def test_options_match_a_direct_computation(tmp_path, seed):
    model, search = search_for(tmp_path, seed)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        search.reset(rng.integers(0, model.dom_size))  # any assignment, fitting or not
        for v in range(model.nv):
            cost, ok = search.options(v)
            want_cost, want_ok = reference_options(model, search.x, search.load, search.limit, v)
            assert np.allclose(cost, want_cost, rtol=1e-12)
            assert np.array_equal(ok, want_ok)


@pytest.mark.parametrize("seed", range(6))
def test_moves_keep_the_load_exact_and_undo_cleanly(tmp_path, seed):
    model, search = search_for(tmp_path, seed)
    rng = np.random.default_rng(seed)
    start = rng.integers(0, model.dom_size)
    search.reset(start)
    done = []
    for _ in range(50):
        v = int(rng.integers(model.nv))
        done.append((v, int(search.x[v])))
        search.move(v, int(rng.integers(model.dom_size[v])))
        assert np.array_equal(search.load, model.load(search.x))
    for v, old in reversed(done):
        search.move(v, old)
    assert np.array_equal(search.x, start)
    assert np.array_equal(search.load, model.load(start))


@pytest.mark.parametrize("seed", range(6))
def test_descent_and_perturbation_stay_fitting_and_never_worsen(tmp_path, seed):
    model, search = search_for(tmp_path, seed)
    assert search.reset(model.min_usage_solution())
    before = model.cost(search.x)
    search.descend(float("inf"))
    after_descent = model.cost(search.x)
    assert after_descent <= before and model.fits(search.x)
    reports = []
    search.iterate(time.monotonic() + 0.3, reports.append, report_every=0.0)
    costs = [model.cost(x) for x in [*reports, search.x]]
    assert all(c <= after_descent for c in costs)
    assert all(model.fits(x) for x in [*reports, search.x])
    assert np.array_equal(search.load, model.load(search.x))


def test_exchange_trades_memory_where_a_descent_is_stuck(tmp_path):
    # a and b share one time point with room for one large usage. From a=0, b=0
    # (cost 10) a's cheap value needs b's room: a alone may not move, and b
    # alone would only add cost; the exchange a->1 with repair b->1 costs 1.
    problem = {
        "problem": {
            "name": "swap",
            "nodes": {
                "intervals": [[0, 1], [0, 1]],
                "costs": [[10, 0], [0, 1]],
                "usages": [[1, 5], [5, 1]],
            },
            "edges": {"nodes": [], "costs": []},
            "usage_limit": 6,
        }
    }
    model = reduce(read_instance(write_problem(tmp_path / "swap.json", problem)), passes=False)
    search = Search(model, 0)
    assert search.reset(np.zeros(2, dtype=np.int64))
    search.descend(float("inf"))
    assert model.cost(search.x) == 10  # the descent cannot leave
    search.exchanges(float("inf"))
    assert list(search.x) == [1, 1] and model.cost(search.x) == 1
    assert np.array_equal(search.load, model.load(search.x)) and model.fits(search.x)


@pytest.mark.parametrize("seed", range(6))
def test_exchanges_stay_fitting_and_never_worsen(tmp_path, seed):
    model, search = search_for(tmp_path, seed)
    assert search.reset(model.min_usage_solution())
    for _ in range(3):
        before = model.cost(search.x)
        search.exchanges(float("inf"))
        assert model.cost(search.x) <= before and model.fits(search.x)
        assert np.array_equal(search.load, model.load(search.x))


@pytest.mark.parametrize("n", [1, 63, 64, 65, 200, 1000])
def test_blocked_load_matches_a_plain_array(n):
    """Range additions and range maxima of the blocked load (kernels.Load)
    against a plain array, over ranges that start and end anywhere in a block."""
    from maxshard.search import kernels

    rng = np.random.default_rng(n)
    plain = rng.integers(-50, 50, size=n)
    ld = kernels.new_load(plain)
    for _ in range(300):
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo + 1, n + 1))
        change = int(rng.integers(-20, 21))
        kernels.range_add(ld, lo, hi, change)
        plain[lo:hi] += change
        a = int(rng.integers(0, n))
        b = int(rng.integers(a + 1, n + 1))
        assert kernels.range_max(ld, a, b) == plain[a:b].max()
        p, level = kernels.peak(ld)
        assert level == plain.max() and plain[p] == level
    assert np.array_equal(kernels.levels(ld), plain)
