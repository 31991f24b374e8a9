"""The dual ascent (maxshard.ascent, backend ``dual``): valid bounds, against brute
force and an exact LP; optimal multipliers from its LP; state carried on."""

import math
import time

import numpy as np
import pytest

from maxshard.ascent import Ascent
from maxshard.backend import Context
from maxshard.backends.dual import Dual
from maxshard.bound import integer_bound, slack
from maxshard.generate import generate
from maxshard.instance import FORBIDDEN
from maxshard.mip import MipForm, new_highs
from maxshard.model import penalties
from maxshard.orchestrate import Best, run_backends
from maxshard.reader import read_instance

from .conftest import Recorder, brute_force, generated, reduced, write_problem


def with_memory_rows(tmp_path, seed: int, **kwargs) -> tuple:
    """A generated model (no forbidden choices, memory as tight as it can be)
    and its ascent, whose multiplier LP must keep memory rows."""
    kwargs = {"forbidden": 0.0, "tightness": 0.0, **kwargs}
    model = reduced(generated(tmp_path, seed, **kwargs))
    ascent = Ascent(model)
    assert ascent.lp is not None, "precondition: the fixed instance keeps memory rows"
    return model, ascent


def lp_optimum(model) -> float:
    """The LP over the local polytope with the memory rows, solved by HiGHS."""
    import highspy

    mip = MipForm(model)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    n = len(mip.cost)
    h.addCols(n, mip.cost, np.zeros(n), mip.upper, 0, [], [], [])
    lower = np.where(np.isinf(mip.row_lo), -highspy.kHighsInf, mip.row_lo)
    nnz = len(mip.a_index)
    h.addRows(len(lower), lower, mip.row_hi, nnz, mip.a_start, mip.a_index, mip.a_value)
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return h.getInfo().objective_function_value + model.offset


def climb(model, seconds: float = 1.0) -> list[int]:
    found = Recorder()
    Dual().solve(model, time.monotonic() + seconds, None, found)
    return found.bounds


#: fixed instances: the seeds whose instance has a clean solution and keeps variables
#: after presolve (the test fails, not skips, should one stop having them)
BOUNDED_SEEDS = [3, 6, 7, 10, 15, 19, 21, 22, 25, 26, 27, 30, 33, 39, 42, 43]


@pytest.mark.parametrize("seed", BOUNDED_SEEDS)
def test_dual_bounds_never_exceed_the_optimum(tmp_path, seed):
    """Tight and loose memory, forbidden picks, and (odd seeds) costs of very
    different magnitudes: every bound reported is at most the brute-force optimum."""
    rng = np.random.default_rng(seed)
    problem = generate(
        nodes=8, forbidden=0.1 * (seed % 3), tightness=(-0.05, 0.0, 0.2, 0.6)[seed % 4], seed=seed
    )
    if seed % 2:
        nodes = problem["problem"]["nodes"]
        scaled = [[c if c >= FORBIDDEN else c * 10 ** int(rng.integers(0, 7)) for c in cs]
                  for cs in nodes["costs"]]  # fmt: skip
        nodes["costs"] = scaled
    inst = read_instance(write_problem(tmp_path / "p.json", problem))
    best, _ = brute_force(inst)
    model = reduced(inst)
    if best is None or not model.nv:
        pytest.fail(
            "precondition failed: presolve solved it, or no clean solution: nothing to bound"
        )
    bounds = climb(model)
    assert bounds, "a model with variables gets a bound"
    assert all(b <= best for b in bounds)
    assert bounds == sorted(bounds)  # reported as they rise


@pytest.mark.parametrize("seed", range(1, 9))  # seed 0 keeps no table after presolve
def test_ascent_never_passes_the_lp_optimum(tmp_path, seed):
    """The ascent climbs the dual of the LP over the local polytope with the
    memory rows: its bounds never pass the LP's optimum (HiGHS's), rounded
    up (costs are integers, so the optimum is at least that ceiling)."""
    inst = generated(tmp_path, seed, nodes=12, max_strategies=4, forbidden=0.0, tightness=0.1)
    model = reduced(inst)
    assert model.m, "precondition: the fixed instance keeps tables after presolve"
    lp = lp_optimum(model)
    bounds = climb(model, 0.5)
    assert bounds and bounds[-1] <= math.ceil(lp + 1e-6 * abs(lp))


def test_ascent_is_exact_on_a_chain_without_memory(tmp_path):
    """A path is a tree: the LP is tight there and the ascent reaches the optimum."""
    rng = np.random.default_rng(7)
    sizes = rng.integers(2, 5, size=8).tolist()
    nodes = {
        "intervals": [[0, 0]] * 8,
        "costs": [rng.integers(0, 50, k).tolist() for k in sizes],
        "usages": [[0] * k for k in sizes],
    }
    pairs = [[i, i + 1] for i in range(7)]
    tables = [rng.integers(0, 50, sizes[i] * sizes[i + 1]).tolist() for i in range(7)]
    edges = {"nodes": pairs, "costs": tables}
    problem = {"problem": {"name": "chain", "nodes": nodes, "edges": edges}}
    inst = read_instance(write_problem(tmp_path / "chain.json", problem))
    from maxshard.reduce import reduce

    model = reduce(inst, passes=False)
    best, _ = brute_force(inst)
    assert best - 2 <= climb(model, 2.0)[-1] <= best


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 5, 6])  # those that keep memory rows
def test_multiplier_lp_gives_the_best_multipliers_for_the_messages(tmp_path, seed):
    """For fixed messages the bound is a concave function of the multipliers; the
    LP's multipliers maximise it: no other multipliers give more."""
    model, ascent = with_memory_rows(tmp_path, seed, nodes=10)
    for _ in range(3):
        ascent.diffusion.sweep(ascent.unary())
    theta = ascent.diffusion.node_costs(model.unary.astype(np.float64))
    edges = ascent.diffusion.edge_minima()

    def value(lam: np.ndarray) -> float:
        nodes = np.minimum.reduceat(theta + penalties(model, lam), model.dom_off[:-1]).sum()
        return nodes + edges - slack(model, lam)

    lam = ascent.lp.best(theta)
    assert lam is not None and (lam >= 0).all()
    rng = np.random.default_rng(seed)
    best = value(lam)
    for _ in range(50):
        other = np.maximum(0.0, lam + rng.normal(size=len(lam)) * rng.choice([1e-3, 1e-1, 1.0]))
        assert value(other) <= best + 1e-6 * abs(best)
    assert value(np.zeros(len(lam))) <= best + 1e-6 * abs(best)
    # and what the ascent reports for them is this value's ceiling at most (costs are integers)
    reported = integer_bound(model, best + slack(model, lam), slack(model, lam))
    assert reported <= math.ceil(best) + model.offset


def whole_multiplier_lp(model, theta: np.ndarray) -> float:
    """``min theta . x``, one value per variable, a row per point for the usage
    of every term live there: the multiplier LP whole, solved by HiGHS."""
    import highspy

    nval = int(model.dom_off[-1])
    h = new_highs()
    h.addCols(nval, theta, np.zeros(nval), np.ones(nval), 0, [], [], [])
    for v in range(model.nv):
        cols = np.arange(model.dom_off[v], model.dom_off[v + 1], dtype=np.int32)
        h.addRow(1.0, 1.0, len(cols), cols, np.ones(len(cols)))
    for p in range(len(model.base)):
        live = np.flatnonzero((model.term_lo <= p) & (p < model.term_hi))
        usage = np.zeros(nval)
        for k in live:
            start = model.dom_off[model.term_var[k]]
            usage[start : start + len(model.usage_of(k))] += model.usage_of(k)
        cols = np.flatnonzero(usage).astype(np.int32)
        h.addRow(-highspy.kHighsInf, float(model.limit - model.base[p]), len(cols), cols,
                 usage[cols])  # fmt: skip
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return h.getInfo().objective_function_value


def test_multiplier_lp_in_parts_reaches_the_whole_lps_optimum(tmp_path):
    """The LP solved on its binding points and hull values, grown until its
    solution fits everywhere, has the whole LP's optimum: its multipliers give
    the whole LP's value (strong duality), at the first call and at later ones,
    which start from the points that bound before."""
    binding = 0
    for seed in range(6):
        model, ascent = with_memory_rows(tmp_path, seed, nodes=80, functional=0.0)
        for _ in range(3):
            ascent.diffusion.sweep(ascent.unary())
            theta = ascent.diffusion.node_costs(model.unary.astype(np.float64))
            lam = ascent.lp.best(theta)
            assert lam is not None and (lam >= 0).all()
            nodes = np.minimum.reduceat(theta + penalties(model, lam), model.dom_off[:-1]).sum()
            value = nodes - float(np.dot(lam, model.limit - model.base))
            assert value == pytest.approx(whole_multiplier_lp(model, theta), rel=1e-6, abs=1e-6)
            ascent.lam = lam
        binding += bool(ascent.lp.active.any())
    assert binding >= 3, "most of these models have points where memory binds"


def test_warm_up_loads_the_multiplier_lps_kernel():
    """The workers fork after the warm-up: the LP's hull kernel must be in it."""
    from maxshard.ascent import lower_hull
    from maxshard.search.local import warm_up

    warm_up()
    assert lower_hull.signatures


def test_multiplier_lp_runs_after_highs_ran_on_other_threads_in_the_process(tmp_path):
    """HiGHS's thread scheduler is global to a process: once a run on two
    threads has set it up (here, as a user's session or a test might), the
    ascent's one-thread LP must still solve, not fail with no multipliers."""
    import highspy

    h = new_highs(threads=2)  # as in a session whose first run used two
    h.addCols(2, np.array([1.0, 2.0]), np.zeros(2), np.ones(2), 0, [], [], [])
    rows = (np.array([0], dtype=np.int32), np.array([0, 1], dtype=np.int32), np.ones(2))
    h.addRows(1, np.ones(1), np.ones(1), 2, *rows)
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    model, ascent = with_memory_rows(tmp_path, 0, nodes=10)
    theta = ascent.diffusion.node_costs(model.unary.astype(np.float64))
    assert ascent.lp.best(theta) is not None


def test_dual_goes_on_from_the_state_carried_between_stages(tmp_path):
    """The orchestrator keeps the state a backend hands over; a backend of the same
    name in the next stage inherits it and starts where the first one stopped."""
    inst = generated(tmp_path, 3, nodes=40, forbidden=0.0, tightness=0.1, functional=0.0)
    model = reduced(inst)
    assert model.forbidden_cost == FORBIDDEN  # bounds hold for the instance
    best = Best(inst, lambda _line: None)
    carry: dict = {}
    run_backends(model, best, ["dual"], time.monotonic() + 2.0, workers=1, carry=carry)
    assert "dual" in carry and len(carry["dual"]["lam"]) == len(model.base)
    first = best.lower_bound
    again = Recorder()
    Dual().solve(model, time.monotonic() + 0.2, None, Context(again, inherited=carry["dual"]))
    assert first is not None and again.bounds and again.bounds[0] >= first - 1
