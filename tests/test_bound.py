"""The diffusion and TRW-S bounds are valid lower bounds, with and without memory
multipliers; on a chain both are exact, and TRW-S decodes the optimum."""

import itertools
import time

import numpy as np
import pytest

from maxshard.ascent import state_of
from maxshard.bound import TRWS, Diffusion
from maxshard.model import penalties
from maxshard.reader import read_instance
from maxshard.reduce import Infeasible, reduce

from .conftest import brute_force, generated, write_problem


def model_optimum(model, memory=True):
    best = None
    for x in itertools.product(*(range(int(k)) for k in model.dom_size)):
        x = np.array(x, dtype=np.int64)
        if model.forbidden(x) or (memory and not model.fits(x)):
            continue
        cost = model.cost(x)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("messages", [Diffusion, TRWS])
@pytest.mark.parametrize("seed", range(12))
def test_bound_never_exceeds_the_optimum(tmp_path, seed, messages):
    # no functional edges: presolve leaves variables to bound (with them, 11 of
    # these 12 instances were solved by presolve alone and bounded nothing)
    inst = generated(tmp_path, seed, nodes=8, max_strategies=3, forbidden=0.0, functional=0.0,
                     tightness=0.2)  # fmt: skip
    best, _ = brute_force(inst)
    try:
        model = reduce(inst)
    except Infeasible:
        pytest.fail("precondition failed: no clean solution fits: nothing to bound")
    if best is None or not model.nv:
        pytest.fail(
            "precondition failed: presolve solved it, or no clean solution: nothing to bound"
        )
    diffusion = messages(model)
    rng = np.random.default_rng(seed)
    bounds = [diffusion.bound(None, None, time.monotonic() + 5)]
    for _ in range(3):  # any multipliers give a bound on the model with memory
        lam = rng.random(len(model.base)) * 5
        bounds.append(diffusion.bound(lam, penalties(model, lam), time.monotonic() + 5))
    assert all(b is not None and b <= best for b in bounds)
    x = diffusion.decode(model.unary.astype(np.float64))
    assert ((x >= 0) & (x < model.dom_size)).all()


def chain(tmp_path, seed):
    """A path of 6 variables with random costs, not presolved."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 5, size=6).tolist()
    nodes = {
        "intervals": [[0, 0]] * 6,
        "costs": [rng.integers(0, 50, k).tolist() for k in sizes],
        "usages": [[0] * k for k in sizes],
    }
    pairs = [[i, i + 1] for i in range(5)]
    tables = [rng.integers(0, 50, sizes[i] * sizes[i + 1]).tolist() for i in range(5)]
    prob = {
        "problem": {"name": "chain", "nodes": nodes, "edges": {"nodes": pairs, "costs": tables}}
    }
    model = reduce(read_instance(write_problem(tmp_path / "chain.json", prob)), passes=False)
    assert model.nv == 6 and model.m == 5
    return model


@pytest.mark.parametrize("seed", range(6))
def test_bound_is_exact_on_a_chain(tmp_path, seed):
    # a path is a tree: the local polytope is tight and diffusion reaches it
    # (up to the safety margin of the float arithmetic)
    model = chain(tmp_path, seed)
    exact = model_optimum(model, memory=False)
    found = Diffusion(model).bound(None, None, time.monotonic() + 10, sweeps=300)
    assert exact - 2 <= found <= exact


@pytest.mark.parametrize("seed", range(6))
def test_trws_solves_a_chain_in_two_sweeps(tmp_path, seed):
    # one sweep carries the whole chain's cost to its end (the bound), the
    # sweep back to its start; decoding in order is then dynamic programming
    model = chain(tmp_path, seed)
    exact = model_optimum(model, memory=False)
    trws = TRWS(model)
    assert trws.bound(None, None, time.monotonic() + 10, sweeps=2) == exact
    assert model.cost(trws.decode(model.unary.astype(np.float64))) == exact


def test_messages_go_on_from_a_handed_over_state(tmp_path):
    # the free rounds of a later stage restore the messages an earlier one
    # handed over (state_of); messages of another model are ignored
    model, other = chain(tmp_path, 0), chain(tmp_path, 1)
    unary = model.unary.astype(np.float64)
    first = TRWS(model)
    first.sweep(unary)
    state = state_of(np.zeros(0), first)
    later = TRWS(model)
    later.restore(state)
    assert later.value(unary) == first.value(unary) > TRWS(model).value(unary)
    foreign = TRWS(other)
    before = foreign.phi_row.copy()
    foreign.restore({"phi_row": np.zeros(len(before) + 1), "phi_col": state["phi_col"]})
    assert np.array_equal(foreign.phi_row, before)
