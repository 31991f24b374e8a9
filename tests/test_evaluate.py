import numpy as np
import pytest

from maxshard.evaluate import evaluate, exact_sum
from maxshard.instance import FORBIDDEN
from maxshard.reader import read_instance

from .conftest import generated, write_problem


def problem(intervals, costs, usages, edges=(), tables=(), limit=None):
    p = {
        "nodes": {"intervals": intervals, "costs": costs, "usages": usages},
        "edges": {"nodes": list(edges), "costs": list(tables)},
    }
    if limit is not None:
        p["usage_limit"] = limit
    return {"problem": p}


def load(tmp_path, **kw):
    return read_instance(write_problem(tmp_path / "p.json", problem(**kw)))


def test_example_optimum_and_other_choices(example):
    assert evaluate(example, [0, 0, 2, 1, 0]).cost == 445
    # 15 + 65 + 45 + 75 + 95 nodes; edges 40 + 40 + 80 + 30 + 60
    ev = evaluate(example, [0, 1, 1, 1, 0])
    assert ev.cost == 15 + 65 + 45 + 75 + 95 + 40 + 10 + 80 + 20 + 60
    assert ev.peak == 10 + 25 + 20 and not ev.feasible and ev.first_violation == 50


def test_exact_sum_with_sentinels():
    values = np.array([FORBIDDEN] * 12 + [7], dtype=np.int64)
    assert exact_sum(values) == 12 * 10**18 + 7


def test_sentinel_costs_are_summed_exactly_and_counted(tmp_path):
    inst = load(
        tmp_path,
        intervals=[[0, 1], [0, 1]],
        costs=[[FORBIDDEN, 3], [FORBIDDEN]],
        usages=[[1, 1], [1]],
        edges=[[0, 1]],
        tables=[[FORBIDDEN, 5]],
    )
    ev = evaluate(inst, [0, 0])
    assert ev.cost == 3 * FORBIDDEN and ev.forbidden == 3 and ev.feasible and not ev.clean
    assert evaluate(inst, [1, 0]).cost == 3 + FORBIDDEN + 5


def test_half_open_intervals_and_empty_ones(tmp_path):
    # node 0 lives [0, 5), node 1 [5, 9): never together; node 2 [0, 0] never lives
    inst = load(
        tmp_path,
        intervals=[[0, 5], [5, 9], [0, 0]],
        costs=[[1], [1], [1]],
        usages=[[10], [10], [1000]],
        limit=10,
    )
    ev = evaluate(inst, [0, 0, 0])
    assert ev.feasible and ev.peak == 10


def test_limit_exceeded_reports_first_time(tmp_path):
    inst = load(tmp_path, intervals=[[2, 6], [4, 8]], costs=[[0], [0]], usages=[[6], [5]], limit=10)
    ev = evaluate(inst, [0, 0])
    assert not ev.feasible and ev.first_violation == 4 and ev.peak == 11


def test_parallel_and_reversed_edges_add_up(tmp_path):
    inst = load(
        tmp_path,
        intervals=[[0, 1], [0, 1]],
        costs=[[0, 0], [0, 0, 0]],
        usages=[[0, 0], [0, 0, 0]],
        edges=[[0, 1], [1, 0], [0, 1]],
        tables=[[1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60], [100, 200, 300, 400, 500, 600]],
    )
    # x0=1, x1=2: table0[1*3+2]=6, reversed table1[2*2+1]=60, table2[1*3+2]=600
    assert evaluate(inst, [1, 2]).cost == 666


def test_no_usage_limit_is_always_feasible(tmp_path):
    inst = load(tmp_path, intervals=[[0, 3]], costs=[[4]], usages=[[10**12]])
    ev = evaluate(inst, [0])
    assert ev.feasible and ev.peak == 10**12


def test_bad_solutions_are_rejected(example):
    with pytest.raises(ValueError, match="5 nodes"):
        evaluate(example, [0, 0])
    with pytest.raises(ValueError, match="node 2: strategy 3 out of range"):
        evaluate(example, [0, 0, 3, 0, 0])


@pytest.mark.parametrize("seed", range(4))
def test_usage_profile_matches_the_usage_at_every_integer_time(tmp_path, seed):
    """The profile (event times sorted once per instance, then reduced per
    solution) against the sum over the nodes live at each time, recounted."""
    from maxshard.evaluate import usage_profile

    inst = generated(tmp_path, seed, nodes=60, tightness=0.4)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        sol = rng.integers(0, inst.n_strategies)
        times, level = usage_profile(inst, sol)
        used = inst.usage[inst.strat_off[:-1] + sol]
        for t in range(int(inst.lo.min()), int(inst.hi.max()) + 1):
            expected = int(used[(inst.lo <= t) & (t < inst.hi)].sum())
            k = np.searchsorted(times, t, side="right") - 1  # the last event at or before t
            assert (int(level[k]) if k >= 0 else 0) == expected, t


def test_an_instance_where_no_node_is_ever_live_uses_nothing(tmp_path):
    inst = load(tmp_path, intervals=[[3, 3], [0, 0]], costs=[[1], [2]], usages=[[9], [9]], limit=1)
    ev = evaluate(inst, [0, 0])
    assert ev.feasible and ev.peak == 0 and ev.cost == 3
