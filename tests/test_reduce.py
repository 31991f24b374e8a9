"""Presolve must keep the optimum and reconstruct solutions with exact costs."""

import itertools

import numpy as np
import pytest

from maxshard.evaluate import evaluate
from maxshard.instance import FORBIDDEN
from maxshard.model import kept_points, running_sum
from maxshard.reader import read_instance
from maxshard.reduce import Infeasible, forbidden_free_values, reduce

from .conftest import brute_force, generated, reduced, write_problem

CASES = [
    dict(nodes=n, max_strategies=s, forbidden=f, tightness=t, functional=0.5)
    for n, s, f, t in itertools.product((4, 6), (2, 3), (0.0, 0.15), (-0.1, 0.0, 0.3, 1.0))
] + [  # many nodes without memory: degree-2 eliminations
    dict(nodes=7, max_strategies=3, forbidden=f, tightness=t, functional=0.2, idle=0.7)
    for f, t in itertools.product((0.0, 0.15), (0.0, 0.3))
]


def model_solutions(model):
    for x in itertools.product(*(range(int(k)) for k in model.dom_size)):
        yield np.array(x, dtype=np.int64)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", CASES, ids=str)
def test_reduced_optimum_equals_brute_force(tmp_path, case, seed):
    check_against_brute_force(generated(tmp_path, seed, **case))


def check_against_brute_force(inst):
    """Every reduced solution reconstructs exactly; the reduced optimum is the optimum."""
    best_cost, _ = brute_force(inst)
    try:
        model = reduce(inst)
    except Infeasible:
        # then no assignment at all fits in memory
        for sol in itertools.product(*(range(k) for k in inst.n_strategies)):
            assert not evaluate(inst, np.array(sol)).feasible
        return None
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
    return model


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


def problem(intervals, costs, usages, pairs, tables, limit):
    nodes = {"intervals": intervals, "costs": costs, "usages": usages}
    edges = {"nodes": pairs, "costs": tables}
    return {"problem": {"name": "t", "nodes": nodes, "edges": edges, "usage_limit": limit}}


def test_degree2_variables_are_eliminated(tmp_path):
    # a ring of five nodes that are never live: each has two neighbours, no memory
    rng = np.random.default_rng(5)
    pairs = [[i, (i + 1) % 5] for i in range(5)]
    tables = [rng.integers(0, 50, size=9).tolist() for _ in pairs]
    costs = [rng.integers(0, 50, size=3).tolist() for _ in range(5)]
    prob = problem([[0, 0]] * 5, costs, [[1, 2, 3]] * 5, pairs, tables, 10)
    inst = read_instance(write_problem(tmp_path / "ring.json", prob))
    model = check_against_brute_force(inst)
    assert model.eliminations
    assert model.nv < 5


def test_the_compiled_min_plus_product_is_the_first_least_one():
    """``compiled.min_through`` against its definition, entry by entry, on tables
    with forbidden costs and ties (the first middle value wins a tie)."""
    from maxshard.reduce.compiled import min_through

    rng = np.random.default_rng(7)
    for a, b, c in [(1, 1, 1), (3, 4, 2), (5, 1, 6), (4, 7, 4)]:
        left = rng.integers(0, 5, size=(a, b))
        left[rng.random((a, b)) < 0.2] = FORBIDDEN
        middle = rng.integers(0, 3, size=b)
        right = rng.integers(0, 5, size=(b, c))
        right[rng.random((b, c)) < 0.2] = FORBIDDEN
        best, choice = min_through(left, middle, right)
        for i, k in itertools.product(range(a), range(c)):
            through = [int(left[i, j] + middle[j] + right[j, k]) for j in range(b)]
            assert best[i, k] == min(through)
            assert choice[i, k] == through.index(min(through))


def test_the_compiled_dominance_test_is_its_definition():
    """``compiled.dominated`` against its definition and against numpy's test,
    on features with ties (of two equal values the first is kept)."""
    from maxshard.reduce.dominated import _dominated

    rng = np.random.default_rng(3)
    f = rng.integers(0, 3, size=(50, 5, 3))
    compiled, plain = _dominated(f, True), _dominated(f, False)
    assert np.array_equal(compiled, plain)
    for t, b in itertools.product(range(50), range(5)):
        beaten = any(
            (f[t, a] <= f[t, b]).all() and ((f[t, a] < f[t, b]).any() or a < b)
            for a in range(5)
            if a != b
        )
        assert compiled[t, b] == beaten
    assert compiled.any() and not compiled.all()  # the precondition: both kinds occur


@pytest.mark.parametrize("seed", range(4))
def test_forbidden_arc_consistency_and_dominance_compiled_or_not_are_the_same(
    tmp_path, monkeypatch, seed
):
    """On a model large enough (:data:`~maxshard.reduce.collapse.COMPILED_ENTRIES`)
    the forbidden values' arc consistency and the dominance test run compiled:
    the same values survive, and presolve makes the same model."""
    import maxshard.reduce.collapse as collapse
    from maxshard.model import fingerprint

    inst = generated(tmp_path, seed, nodes=60, max_strategies=6, forbidden=0.3, tightness=0.3)
    results = []
    for entries in (10**18, 0):  # numpy, then compiled
        monkeypatch.setattr(collapse, "COMPILED_ENTRIES", entries)
        results.append((forbidden_free_values(inst), reduced(inst)))
    (alive, plain), (alive_c, compiled) = results
    # the precondition: tables remove values their own costs do not
    assert (~alive & (inst.cost < FORBIDDEN)).any()
    assert np.array_equal(alive, alive_c)
    assert fingerprint(compiled) == fingerprint(plain)


@pytest.mark.parametrize("seed", range(4))
def test_degree2_eliminations_compiled_or_not_make_the_same_model(tmp_path, monkeypatch, seed):
    import maxshard.reduce.degree2 as degree2
    from maxshard.model import fingerprint
    from maxshard.reduce.compiled import min_through

    inst = generated(tmp_path, seed, nodes=40, max_strategies=5, idle=0.7, tightness=0.3)
    monkeypatch.setattr(degree2, "_compiled", None)
    monkeypatch.setattr(degree2, "COMPILED_AFTER", 10**18)
    plain = reduced(inst)
    assert plain.eliminations  # the precondition: there are eliminations to compare
    monkeypatch.setattr(degree2, "_compiled", min_through)
    compiled = reduced(inst)
    assert fingerprint(compiled) == fingerprint(plain)
    assert len(compiled.eliminations) == len(plain.eliminations)
    for a, b in zip(compiled.eliminations, plain.eliminations, strict=True):
        assert np.array_equal(a.choice, b.choice) and np.array_equal(a.maps, b.maps)


def test_dominated_values_are_dropped(tmp_path):
    # node 0 (alone, live): value 1 costs and uses more than value 0; value 2 is a
    # real trade-off (dearer, smaller)
    prob = problem([[0, 2], [0, 2]], [[5, 7, 9], [0, 0]], [[4, 6, 1], [3, 1]], [], [], 8)
    inst = read_instance(write_problem(tmp_path / "dom.json", prob))
    model = check_against_brute_force(inst)
    kept = model.node_map[model.map_off[0] : model.map_off[1]]
    assert sorted(kept.tolist()) == [0, 2]


def test_dominated_time_points_are_dropped(tmp_path):
    # live sets {a, f1} on [0, 3) and {a, v, f2} on [3, 6) are both maximal, but
    # f1 and f2 have one strategy: the second point carries a's usage and more
    # fixed load (f2 >= f1), so its check implies the first one's
    prob = problem(
        [[0, 6], [0, 3], [3, 6], [3, 6]],
        [[1, 2], [0], [0, 3], [0]],
        [[5, 1], [3], [6, 2], [4]],
        [],
        [],
        12,
    )
    inst = read_instance(write_problem(tmp_path / "pts.json", prob))
    assert len(kept_points(inst)) == 2
    model = check_against_brute_force(inst)
    assert model.nv == 2 and model.point_time.tolist() == [3]


@pytest.mark.parametrize("seed", range(20))
def test_vectorised_arc_consistency_matches_the_definition(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=8, max_strategies=4, forbidden=0.4, functional=0.3)
    alive = inst.cost < FORBIDDEN
    changed = True
    while changed:  # the textbook fixpoint, one edge at a time
        changed = False
        for e in range(inst.m):
            u, v = int(inst.edge_u[e]), int(inst.edge_v[e])
            su = slice(inst.strat_off[u], inst.strat_off[u + 1])
            sv = slice(inst.strat_off[v], inst.strat_off[v + 1])
            ok = (inst.edge_table(e) < FORBIDDEN) & alive[su][:, None] & alive[sv][None, :]
            for s, support in ((su, ok.any(axis=1)), (sv, ok.any(axis=0))):
                if (alive[s] & ~support).any():
                    alive[s] &= support
                    changed = True
    assert np.array_equal(forbidden_free_values(inst), alive)


@pytest.mark.parametrize("seed", range(10))
def test_running_sum_form_gives_the_load(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=12, max_strategies=4, forbidden=0.0, tightness=0.6)
    model = reduced(inst)
    row_off, value, delta = running_sum(model)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        x = rng.integers(0, model.dom_size) if model.nv else np.zeros(0, dtype=np.int64)
        chosen = np.zeros(int(model.dom_off[-1]), dtype=np.int64)
        chosen[model.dom_off[:-1] + x] = 1
        change = np.add.reduceat(np.append(delta * chosen[value], 0), row_off[:-1])
        change[row_off[:-1] == row_off[1:]] = 0  # reduceat's empty rows
        assert np.array_equal(np.cumsum(change), model.load(x) - model.base)


@pytest.mark.parametrize("seed", range(4))
def test_dominance_of_lone_variables_matches_the_pairwise_rule(tmp_path, seed):
    """Variables with no edge and one memory term are pruned all at once
    (``dominated._prune_alone``): each keeps exactly the values that no other
    of its values beats in cost and usage (the first of equal ones)."""
    from maxshard.reduce import Draft
    from maxshard.reduce.dominated import prune_dominated

    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 9, size=40)
    # few distinct numbers: many ties and dominated values
    costs = [rng.integers(0, 4, size=d).tolist() for d in sizes]
    usages = [rng.integers(1, 4, size=d).tolist() for d in sizes]
    prob = problem([[0, 5]] * len(sizes), costs, usages, [], [], 10**9)
    work = Draft(read_instance(write_problem(tmp_path / "lone.json", prob)), clean=True)
    lone = [v for v in range(len(work.unary)) if work.alive[v] and len(work.unary[v]) >= 2]
    assert lone and all(not work.nbrs[v] and len(work.terms[v]) == 1 for v in lone)
    before = {v: (work.unary[v].copy(), work.terms[v][0][2].copy()) for v in lone}
    assert prune_dominated(work) > 0
    for v, (cost, use) in before.items():
        d = len(cost)
        keep = [
            not any(
                cost[a] <= cost[b]
                and use[a] <= use[b]
                and (cost[a] < cost[b] or use[a] < use[b] or a < b)
                for a in range(d)
                if a != b
            )
            for b in range(d)
        ]
        assert np.array_equal(work.unary[v], cost[keep])
        assert np.array_equal(work.terms[v][0][2], use[keep])


@pytest.mark.parametrize("seed", range(6))
def test_dominance_of_connected_variables_matches_the_pairwise_rule(tmp_path, seed):
    """Variables with edges are compared all at once per shape of their features
    (cost, usage in each term, each incident table's rows): each keeps exactly
    the values that no other of its values beats on every feature (the first of
    equal ones), judged on the features as the pass found them."""
    from maxshard.reduce import Draft
    from maxshard.reduce.dominated import prune_dominated

    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 5, size=12)
    pairs = sorted({tuple(sorted(rng.choice(12, 2, replace=False).tolist())) for _ in range(14)})
    # few distinct numbers: many ties and dominated values
    costs = [rng.integers(0, 3, size=d).tolist() for d in sizes]
    usages = [rng.integers(1, 3, size=d).tolist() for d in sizes]
    tables = [rng.integers(0, 2, size=sizes[u] * sizes[v]).tolist() for u, v in pairs]
    prob = problem([[0, 5]] * len(sizes), costs, usages, [list(p) for p in pairs], tables, 10**9)
    inst = read_instance(write_problem(tmp_path / "linked.json", prob))
    work = Draft(inst)
    linked = [v for v in work.live_vars() if work.nbrs[v] and len(work.unary[v]) >= 2]
    assert linked
    before = {}
    for v in linked:
        parts = [work.unary[v][:, None]] + [use[:, None] for _, _, use in work.terms[v]]
        parts += [work.table(v, w) for w in sorted(work.nbrs[v])]
        before[v] = (work.unary[v].copy(), np.hstack(parts))
    prune_dominated(work)
    for v, (cost, f) in before.items():
        d = len(cost)
        keep = [
            not any(
                (f[a] <= f[b]).all() and ((f[a] < f[b]).any() or a < b) for a in range(d) if a != b
            )
            for b in range(d)
        ]
        assert np.array_equal(work.node_map[v], np.flatnonzero(keep))  # which, not only how many


def test_covering_range_matches_the_definition():
    """For each point, the largest start and the smallest end of the ranges that
    hold it (0 and the point count where none does), checked point by point."""
    from maxshard.reduce.points import _covering_range

    rng = np.random.default_rng(0)
    for _ in range(200):
        npts, m = int(rng.integers(1, 40)), int(rng.integers(0, 30))
        lo = rng.integers(0, npts, m)
        hi = np.minimum(lo + 1 + rng.integers(0, npts, m), npts)
        first, last = _covering_range(lo, hi, npts)
        for p in range(npts):
            held = (lo <= p) & (p < hi)
            assert first[p] == (lo[held].max() if held.any() else 0)
            assert last[p] == (hi[held].min() if held.any() else npts)


@pytest.mark.parametrize("pause", [True, False])
def test_reading_and_presolve_run_without_the_cyclic_collector(tmp_path, monkeypatch, pause):
    """They build many lists that hold no cycles, which the collector's passes
    walked for nothing (0.2-0.5 s of each on the benchmarks); without the
    pause the same work collects many times."""
    import contextlib
    import gc

    from maxshard import reader
    from maxshard import reduce as presolve
    from maxshard.generate import generate

    path = write_problem(tmp_path / "p.json", generate(seed=3, nodes=1500, tightness=0.3))
    if not pause:
        for module in (reader, presolve):
            monkeypatch.setattr(module, "paused", contextlib.nullcontext)
    passes: list[int] = []
    track = lambda phase, info: passes.append(info["generation"]) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(track)
    try:
        model = reduce(read_instance(path))
    finally:
        gc.callbacks.remove(track)
    assert gc.isenabled() and model.nv > 0
    # paused: at most the one pass after each (of what they left young), each trivial
    assert len(passes) <= 2 if pause else len(passes) > 3, passes
