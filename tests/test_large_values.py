"""Every 64-bit value the contest allows: read, summed and checked exactly."""

import contextlib
import itertools

import numpy as np
import pytest

import maxshard
from maxshard.evaluate import evaluate
from maxshard.reader import InputError, read_instance
from maxshard.reduce import Infeasible, memory_units, reduce

from .conftest import write_problem

TOP = 2**63 - 1


def problem(costs, usages, intervals, limit, edges=(), tables=()):
    p = {"nodes": {"intervals": intervals, "costs": costs, "usages": usages}}
    p["edges"] = {"nodes": list(edges), "costs": list(tables)}
    if limit is not None:
        p["usage_limit"] = limit
    return {"problem": p}


def test_reader_takes_2_63_minus_1_and_refuses_2_63(tmp_path):
    ok = problem([[TOP, 1]], [[TOP, 0]], [[0, TOP]], TOP)
    inst = read_instance(write_problem(tmp_path / "ok.json", ok))
    assert int(inst.cost[0]) == TOP and int(inst.usage[0]) == TOP and inst.usage_limit == TOP
    bad = problem([[2**63]], [[0]], [[0, 1]], 5)
    with pytest.raises(InputError, match=r"costs\[0\]\[0\]"):
        read_instance(write_problem(tmp_path / "bad.json", bad))


def test_costs_near_2_63_are_summed_exactly(tmp_path):
    big = TOP - 5
    p = problem([[big], [big, 3]], [[0], [0, 0]], [[0, 1], [0, 1]], None, [[0, 1]], [[big, 7]])
    inst = read_instance(write_problem(tmp_path / "p.json", p))
    assert evaluate(inst, [0, 0]).cost == 3 * big  # far past int64, to the unit
    assert evaluate(inst, [0, 1]).cost == big + 3 + 7


def test_memory_near_2_63_is_checked_exactly(tmp_path):
    half = 2**62
    # together the two usages reach 2**63, one past the limit; apart they fit
    together = problem([[0], [0]], [[half], [half]], [[0, 2], [1, 3]], TOP)
    apart = problem([[0], [0]], [[half], [half]], [[0, 1], [1, 3]], TOP)
    ev = evaluate(read_instance(write_problem(tmp_path / "t.json", together)), [0, 0])
    assert not ev.feasible and ev.peak == 2**63 and ev.first_violation == 1
    ev = evaluate(read_instance(write_problem(tmp_path / "a.json", apart)), [0, 0])
    assert ev.feasible and ev.peak == half


def brute(inst):
    found = []
    for sol in itertools.product(*(range(k) for k in inst.n_strategies)):
        ev = evaluate(inst, sol)
        if ev.feasible:
            found.append((ev.forbidden, ev.cost, sol))
    return min(found) if found else None


@pytest.mark.parametrize("seed", range(6))
def test_solve_stays_valid_and_exact_with_huge_values(tmp_path, seed):
    """Random instances whose usages and limit sit near 2**63 (so presolve must
    scale memory down) or whose costs do: every answer fits, and where the
    model is exact the answer is the brute-force optimum."""
    rng = np.random.default_rng(seed)
    n = 5
    scale = 2**58 if seed % 2 else 1
    sizes = rng.integers(1, 4, size=n)
    costs = [rng.integers(0, 100, size=s).tolist() for s in sizes]
    if not seed % 2:  # huge costs instead: one near 2**63 per node
        for c in costs:
            c[0] = TOP - int(rng.integers(0, 1000))
    usages = [(rng.integers(1, 8, size=s) * scale + rng.integers(0, 9, size=s)) for s in sizes]
    intervals = [[int(lo), int(lo) + int(rng.integers(1, 4))] for lo in rng.integers(0, 4, size=n)]
    least = [
        sum(int(min(u)) for u, (lo, hi) in zip(usages, intervals, strict=True) if lo <= t < hi)
        for t in range(8)
    ]
    limit = min(TOP, max(least) * 5 // 4)  # a quarter above the all-minimum peak
    usages = [u.tolist() for u in usages]
    pairs = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0]]
    tables = [rng.integers(0, 50, size=int(sizes[u] * sizes[v])).tolist() for u, v in pairs]
    p = problem(costs, usages, intervals, limit, pairs, tables)
    inst = read_instance(write_problem(tmp_path / "p.json", p))
    assert memory_units(inst)[2] == (scale == 1)
    with contextlib.suppress(Infeasible):
        reduce(inst)  # no overflow anywhere in presolve
    best = maxshard.solve(inst, 3, backends=["toulbar2"])
    expected = brute(inst)
    if expected is None:
        assert best.solution is None
        return
    ev = evaluate(inst, best.solution)
    assert ev.feasible
    if scale == 1:
        assert (ev.forbidden, ev.cost) == expected[:2]
    else:
        assert (ev.forbidden, ev.cost) >= expected[:2]
