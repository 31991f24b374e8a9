"""Presolve must keep the optimum and reconstruct solutions with exact costs."""

import itertools

import numpy as np
import pytest

from maxshard.evaluate import evaluate
from maxshard.model import kept_points
from maxshard.reduce import Infeasible, reduce

from .conftest import brute_force, generated

CASES = [
    dict(nodes=n, max_strategies=s, forbidden=f, tightness=t, functional=0.5)
    for n, s, f, t in itertools.product((4, 6), (2, 3), (0.0, 0.15), (-0.1, 0.0, 0.3, 1.0))
]


def model_solutions(model):
    for x in itertools.product(*(range(int(k)) for k in model.dom_size)):
        yield np.array(x, dtype=np.int64)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", CASES, ids=str)
def test_reduced_optimum_equals_brute_force(tmp_path, case, seed):
    inst = generated(tmp_path, seed, **case)
    best_cost, _ = brute_force(inst)
    try:
        model = reduce(inst)
    except Infeasible:
        # then no assignment at all fits in memory
        for sol in itertools.product(*(range(k) for k in inst.n_strategies)):
            assert not evaluate(inst, np.array(sol)).feasible
        return
    reduced_best = None
    for x in model_solutions(model):
        ev = evaluate(inst, model.reconstruct(x))
        assert ev.feasible == model.fits(x)
        if ev.forbidden == 0:
            assert ev.cost == model.cost(x)
            assert model.forbidden(x) == 0
            if ev.feasible and (reduced_best is None or ev.cost < reduced_best):
                reduced_best = ev.cost
    assert reduced_best == best_cost


def test_example_is_solved_by_presolve(example):
    model = reduce(example)
    assert model.nv == 0
    solution = model.reconstruct(np.zeros(0, dtype=np.int64))
    assert solution.tolist() == [0, 0, 2, 1, 0]
    assert evaluate(example, solution).cost == model.offset == 445


def test_kept_points_are_the_maximal_live_sets(example):
    # live sets change at 30,40,50,70,110,120,140,150; maximal ones start at 50 and 110
    assert kept_points(example).tolist() == [50, 110]


def test_infeasible_limit_is_detected(tmp_path):
    inst = generated(tmp_path, 1, nodes=5, tightness=0.0)
    object.__setattr__(inst, "usage_limit", 0)
    usage_needed = any(
        inst.usage[inst.strat_off[i] : inst.strat_off[i + 1]].min() > 0
        for i in range(inst.n)
        if inst.lo[i] < inst.hi[i]
    )
    if usage_needed:
        with pytest.raises(Infeasible):
            reduce(inst)
