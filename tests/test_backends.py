"""Exact backends against brute force (the orchestrator: tests/test_orchestrate.py)."""

import os
import time

import numpy as np
import pytest

import maxshard
from maxshard import registry
from maxshard.backend import Status
from maxshard.backends.toulbar2 import Toulbar2
from maxshard.evaluate import evaluate
from maxshard.reader import read_instance
from maxshard.reduce import Infeasible, reduce

from .conftest import Recorder, contest_optimum, generated

EXACT = ["rc2", "highs", "toulbar2"]
#: the optional extras' exact backends (maxshard[cbc], maxshard[scip]; CI installs both)
EXTRAS = ["cbc", "scip"]


def _solves_to_contest_optimum(inst, name, seed):
    """Run exact backend ``name`` on ``inst`` and check its answer against brute
    force: infeasible when nothing fits, else optimal at the contest's optimum
    (fewest forbidden picks, then least cost). Returns (that optimum, the
    result, the reports) when there is one, None otherwise."""
    expected = contest_optimum(inst)
    try:
        model = reduce(inst)
    except Infeasible:
        assert expected is None
        return None
    found = Recorder()
    result = registry.load(name).solve(model, time.monotonic() + 30, None, found, seed)
    if expected is None:
        assert result.status is Status.INFEASIBLE
        return None
    assert result.status is Status.OPTIMAL
    ev = evaluate(inst, model.reconstruct(result.solution))
    assert ev.feasible and (ev.forbidden, ev.cost) == expected
    return expected, result, found


@pytest.mark.parametrize("name", EXACT + EXTRAS)
@pytest.mark.parametrize("seed", range(16))
def test_exact_backend_matches_brute_force(tmp_path, name, seed):
    """The contest's optimum, also when forbidden picks cannot be avoided (then the
    fewest of them, then the least cost)."""
    tight = (-0.1, 0.0, 0.2, 0.5)[seed % 4]
    inst = generated(tmp_path, seed, nodes=7, forbidden=0.1 * (seed % 3), tightness=tight)
    solved = _solves_to_contest_optimum(inst, name, seed)
    if solved is None:
        return
    expected, result, found = solved
    assert found.solutions and np.array_equal(found.solutions[-1], result.solution)
    if not expected[0]:  # clean: the model's cost is the contest's, and so are bounds
        assert result.lower_bound == expected[1]
        assert all(b <= expected[1] for b in found.bounds)


def test_unavoidable_forbidden_picks_are_few_then_cheap(tmp_path):
    """Cases above where every solution has a forbidden pick, so that the test
    above covers them (the orchestrator's answer: tests/test_cli.py)."""
    unavoidable = 0
    for seed in range(16):
        tight = (-0.1, 0.0, 0.2, 0.5)[seed % 4]
        inst = generated(tmp_path, seed, nodes=7, forbidden=0.1 * (seed % 3), tightness=tight)
        expected = contest_optimum(inst)
        if expected is None or not expected[0]:
            continue
        unavoidable += 1
        # the default plan's answer is that optimum too, proved
        res = maxshard.solve(inst, 5)
        assert (res.forbidden_picks, res.cost) == expected
        assert res.status == "optimal" and res.lower_bound == expected[1]
    assert unavoidable >= 3


def cut_models():
    """Small regions cut from the real benchmarks, presolved; with their models'
    optimum by brute force over the model's values (presolve is exact: see
    tests/test_reduce.py)."""
    from maxshard.generate import cut
    from maxshard.reader import read_instance

    from .conftest import BENCHMARKS

    for letter in "GAS":
        path = BENCHMARKS / f"asplos-2025-iopddl-{letter}.json.gz"
        if not path.exists():
            continue
        source = read_instance(path)
        for seed in range(4):
            try:
                model = reduce(cut(source, 9, seed))
            except Infeasible:
                continue
            if 0 < np.prod(model.dom_size.astype(float)) <= 50_000:
                yield f"{letter}{seed}", model


def model_optimum(model):
    import itertools

    best = None
    for values in itertools.product(*(range(int(d)) for d in model.dom_size)):
        x = np.array(values, dtype=np.int64)
        if model.fits(x) and (best is None or model.cost(x) < best):
            best = model.cost(x)
    return best


@pytest.fixture(scope="module")
def cuts():
    return list(cut_models())


@pytest.mark.parametrize("name", EXACT)
def test_exact_backends_on_cuts_of_real_benchmarks(cuts, name):
    if not cuts:
        pytest.skip("needs the shared benchmarks")
    assert len(cuts) >= 4
    for label, model in cuts:
        best = model_optimum(model)
        result = registry.load(name).solve(model, time.monotonic() + 30, None, Recorder(), 0)
        if best is None:
            assert result.status is Status.INFEASIBLE, label
        else:
            assert result.status is Status.OPTIMAL, label
            assert model.cost(result.solution) == best and model.fits(result.solution), label


def test_highs_streams_improving_solutions_as_it_finds_them(tmp_path):
    """On a model where HiGHS improves several times, each improvement is reported
    while it runs, ending with the optimum."""
    inst = generated(tmp_path, 3, nodes=70, max_strategies=6, forbidden=0.0, tightness=0.1)
    model = reduce(inst)
    found = Recorder()
    result = registry.load("highs").solve(model, time.monotonic() + 60, None, found, 0)
    costs = [model.cost(x) for x in found.solutions]
    assert result.status is Status.OPTIMAL and costs[-1] == result.lower_bound
    assert len(costs) >= 3 and costs == sorted(costs, reverse=True)
    assert all(model.fits(x) for x in found.solutions)


@pytest.mark.parametrize("seed", [0, 1, 2, 18, 39, 57])
def test_rc2_is_exact_when_cost_levels_and_memory_cuts_interact(tmp_path, seed):
    """Costs of very different magnitudes make RC2's stratification levels; memory
    comes as cuts after a level is solved. Hardening by a level's model (which
    may overflow) or by the lighter levels' total once excluded the optimum: at
    seeds 18, 39 and 57 rc2 answered "infeasible" where one forbidden pick is
    the contest's optimum."""
    from maxshard.generate import generate

    from .conftest import write_problem

    rng = np.random.default_rng(seed)
    problem = generate(nodes=9, forbidden=0.0, tightness=0.0, seed=seed)
    nodes = problem["problem"]["nodes"]
    nodes["costs"] = [[c * 10 ** int(rng.integers(0, 6)) for c in cs] for cs in nodes["costs"]]
    inst = read_instance(write_problem(tmp_path / "levels.json", problem))
    _solves_to_contest_optimum(inst, "rc2", seed)


@pytest.mark.parametrize("seed", range(5))
def test_rc2_memory_diagram_accepts_exactly_what_fits(seed):
    """The decision diagram of a knapsack, followed from its root, ends in
    'fits' exactly for the assignments whose weights sum within the room."""
    import itertools

    from maxshard.backends.rc2 import _FALSE, _TRUE, _diagram

    rng = np.random.default_rng(seed)
    weights = [rng.integers(0, 20, size=int(rng.integers(2, 4))) for _ in range(5)]
    weights = [w - w.min() for w in weights]
    room = int(rng.integers(5, 40))
    root, nodes = _diagram(weights, room)
    for x in itertools.product(*[range(len(w)) for w in weights]):
        node, layer = root, 0
        while node not in (_TRUE, _FALSE):
            layer, children = nodes[node]
            node = children[x[layer]]
        assert (node == _TRUE) == (sum(int(w[k]) for w, k in zip(weights, x, strict=True)) <= room)


def test_rc2_builds_memory_diagrams_only_until_its_time_is_up(tmp_path):
    """Diagrams are an optional relaxation built in Python: past ``until`` none
    are added (on a 2,000-node cut of S building them all took over 100 s)."""
    from pysat.formula import IDPool

    from maxshard.backends.rc2 import memory_diagrams

    inst = generated(tmp_path, 4, nodes=30, tightness=0.3, forbidden=0.0, functional=0.0)
    model = reduce(inst)

    def diagrams(until: float) -> list[list[int]]:
        lit = lambda v, k: int(model.dom_off[v]) + k + 1  # noqa: E731
        return memory_diagrams(model, lit, IDPool(start_from=int(model.dom_off[-1]) + 1), until)

    assert diagrams(float("inf"))  # memory binds somewhere: some diagram is built
    assert diagrams(time.monotonic() - 1) == []


def test_toulbar2_restarts_bounded_by_its_best_answer(tmp_path, monkeypatch):
    """A search whose answers stop improving starts again with the best one's
    cost as its initial bound: each bound the cost of an answer it reported,
    each below the last; every answer fits and the result is the best."""
    from maxshard.search import toulbar2

    inst = generated(
        tmp_path, 1, nodes=600, edges=2400, max_strategies=6, forbidden=0.0, functional=0.0
    )
    model = reduce(inst)
    bounds = []
    real = toulbar2.build
    monkeypatch.setattr(
        toulbar2, "build", lambda m, u, s, ub, **k: (bounds.append(ub), real(m, u, s, ub, **k))[1]
    )
    backend = Toulbar2()
    # without VAC's preprocessing the first answer comes sooner (measured on a
    # slower machine: 3.1 s, with VAC 6.6 s); the restart is the same
    backend.restart_quiet, backend.vac = 0.5, 0
    found = Recorder()
    result = backend.solve(model, time.monotonic() + 8, None, found, 0)
    assert bounds[0] is None and len(bounds) >= 2  # the search cannot finish in 8 s
    costs = [model.cost(x) - model.offset for x in found.solutions]
    assert all(b in costs for b in bounds[1:]) and bounds[1:] == sorted(set(bounds[1:]))[::-1]
    assert all(model.fits(x) and not model.forbidden(x) for x in found.solutions)
    assert result.status == Status.FEASIBLE
    assert model.cost(result.solution) - model.offset == min(costs)


def test_toulbar2_search_from_a_loose_bound_restarts_from_a_peers_answer(tmp_path, monkeypatch):
    """A search with no answer of its own yet, whose bound another worker's
    answer beats by half (here: it has none), ends at once and starts again
    bounded by that answer."""
    from maxshard.backend import Context
    from maxshard.search import toulbar2

    inst = generated(
        tmp_path, 1, nodes=600, edges=2400, max_strategies=6, forbidden=0.0, functional=0.0
    )
    model = reduce(inst)
    peer = model.min_usage_solution()
    assert model.fits(peer)  # precondition: the peer's answer fits

    class Run(Context):
        """A run whose best is the peer's answer from its second reading on."""

        def __init__(self) -> None:
            super().__init__(Recorder())
            self.reads = 0

        def best(self):
            self.reads += 1
            return None if self.reads == 1 else peer

    bounds, answers = [], []
    real_build, real_run = toulbar2.build, toulbar2.run
    monkeypatch.setattr(
        toulbar2,
        "build",
        lambda m, u, s, ub, **k: (bounds.append(ub), real_build(m, u, s, ub, **k))[1],
    )
    monkeypatch.setattr(
        toulbar2, "run", lambda *a, **k: (r := real_run(*a, **k), answers.append(r[1]))[0]
    )
    backend = Toulbar2()
    backend.vac = 0
    backend.solve(model, time.monotonic() + 4, None, Run(), 0)
    assert bounds[0] is None and answers[0] is None  # ended before an answer of its own
    assert bounds[1] == model.cost(peer) - model.offset


def test_toulbar2_stop_watches_its_peers_only_until_its_own_first_answer():
    """The reader's :class:`Stop`: with no answer of its own, a peer's answer
    below half the bound ends the search at once, one below the bound itself
    after a quiet spell from the start; once it has its own, only its own
    quiet spell counts."""
    from maxshard.search.toulbar2 import Stop

    run_best = {"cost": 80.0}
    beaten = lambda fraction: run_best["cost"] < fraction * 100  # noqa: E731 (bound 100)
    stop = Stop(os.getpid(), None, quiet=5.0, beaten=beaten, outpaced=0.5)
    assert not stop()  # beaten, not by half, and not yet quiet
    stop.begun -= 6
    assert stop()  # quiet for 6 s since its start, a peer below its bound
    run_best["cost"] = 120.0
    assert not stop()  # nothing below its bound: nothing to restart from
    stop.begun += 6
    run_best["cost"] = 40.0
    assert stop()  # outpaced: at once
    stop.seen()
    assert not stop()  # its own answer: peers no longer end it
    assert not Stop(os.getpid(), None, quiet=5.0)()  # watching no peers


@pytest.mark.parametrize("seed", range(8))
def test_toulbar2_restarted_still_proves_the_contest_optimum(tmp_path, monkeypatch, seed):
    """Its first search made to look stopped before its proof (as after a quiet
    spell), the search starts again below that answer: the proof that ends it
    makes the answer the contest's optimum (brute force; also where every
    answer has a forbidden pick, or nothing fits)."""
    from maxshard.search import toulbar2

    searches = []
    real = toulbar2.run

    def cut_first(*args, **kw):
        proved, x = real(*args, **kw)
        searches.append(proved)
        return (proved and len(searches) > 1), x

    monkeypatch.setattr(toulbar2, "run", cut_first)
    tight = (-0.1, 0.0, 0.2, 0.5)[seed % 4]
    inst = generated(tmp_path, seed, nodes=8, forbidden=0.15 * (seed % 3), tightness=tight)
    if _solves_to_contest_optimum(inst, "toulbar2", seed) is not None:
        assert len(searches) == 2  # the restart proved nothing cheaper exists


@pytest.mark.parametrize("seed", range(8))
def test_toulbar2_keeps_vac_for_long_searches_and_proves_either_way(tmp_path, monkeypatch, seed):
    """VAC's preprocessing only in a search with ``vac_seconds`` or more (the
    brute-force test above, 30 s, runs without it): with it, the same
    contest optimum (brute force)."""
    from maxshard.search import toulbar2

    asked = []
    real = toulbar2.build
    monkeypatch.setattr(
        toulbar2,
        "build",
        lambda m, u, s, ub, **k: (asked.append(k["vac"]), real(m, u, s, ub, **k))[1],
    )
    tight = (-0.1, 0.0, 0.2, 0.5)[seed % 4]
    inst = generated(tmp_path, seed, nodes=7, forbidden=0.1 * (seed % 3), tightness=tight)
    assert Toulbar2.vac_seconds > 30  # the helper's 30 s search: no VAC
    if _solves_to_contest_optimum(inst, "toulbar2", seed) is not None:
        assert asked and set(asked) == {0}
    asked.clear()
    monkeypatch.setattr(Toulbar2, "vac_seconds", 0.0)
    if _solves_to_contest_optimum(inst, "toulbar2", seed) is not None:
        assert asked[0] == Toulbar2.vac == 1


def test_every_toulbar2_problem_gets_the_search_it_asks_for(tmp_path, monkeypatch):
    """toulbar2's options are process-wide, and a preprocessing that proves
    nothing cheaper exists turns its hybrid best-first search off for good (a
    restarted search turns it off on purpose): every problem still searches
    as it asks, and a backend's first search is hybrid best-first."""
    from maxshard.search import toulbar2

    def two_values(ub: float | None, **kw):  # optimum 1
        cfn = toulbar2.new_problem(ub, 0, **kw)
        off, pairs = np.array([0, 2, 4]), np.array([0, 4])
        toulbar2.post(cfn, off, np.array([1, 2, 0, 3]), np.array([0]), np.array([1]), pairs,
                      np.array([0, 0, 0, 5]))  # fmt: skip
        return cfn

    cfn = two_values(1.0)
    assert cfn.Option.hbfs == 1
    assert toulbar2.solve_quietly(cfn, 1.0) is None  # nothing costs less than 1
    assert cfn.Option.hbfs == 0  # what toulbar2 leaves behind
    assert two_values(None).Option.hbfs == 1
    assert two_values(None).Option.hbfsGlobalLimit == toulbar2.HBFS_GLOBAL_LIMIT
    assert two_values(None, hbfs=0).Option.hbfs == 0
    searched = []
    real = toulbar2.run

    def run(cfn, *args, **kw):
        searched.append(cfn.Option.hbfs)
        return real(cfn, *args, **kw)

    monkeypatch.setattr(toulbar2, "run", run)
    two_values(None, hbfs=0)  # as a restart leaves it
    model = reduce(generated(tmp_path, 2, nodes=8, forbidden=0.0, tightness=0.3))
    Toulbar2().solve(model, time.monotonic() + 5, None, Recorder(), 0)
    assert searched[0] == 1


def test_toulbar2_initial_bound_cuts_off_nothing_cheaper():
    """Costs past 2**53 are not all doubles: the bound rounds up, never down."""
    from maxshard.search.toulbar2 import upper_bound

    assert upper_bound(7) == 7.0
    for cost in (2**53 + 1, 3 * 2**60 + 5):
        assert upper_bound(cost) >= cost and upper_bound(cost) - cost <= 2**12


@pytest.mark.parametrize(("seed", "above"), [(6, 1), (2, 30)])
def test_a_toulbar2_search_held_to_its_backtrack_limit_proves_nothing(tmp_path, seed, above):
    """From an initial bound ``above`` the optimum, a search held to one
    backtrack ends without a solution; toulbar2 still prints "No solution"
    (it printed it on these fixed instances), which must not pass as a proof
    that none is cheaper than the bound."""
    from dataclasses import replace

    from maxshard.search import toulbar2

    inst = generated(tmp_path, seed, nodes=200, max_strategies=8, forbidden=0.0, functional=0.0)
    model = reduce(replace(inst, usage_limit=None))
    full = toulbar2.build(model, model.unary, seed, None, memory=False)
    proved, y = toulbar2.run(full, model.nv, 20, lambda _x: None)
    assert proved, "precondition: the whole search proves its optimum"
    ub = toulbar2.upper_bound(model.cost(y) - model.offset + above)
    short = toulbar2.build(model, model.unary, seed, ub, memory=False)
    proved, x = toulbar2.run(short, model.nv, 1e-6, lambda _x: None)  # a backtrack's worth
    assert short.GetNbBacktracks() >= 1, "precondition: the search was held to its limit"
    assert not proved


def test_a_short_toulbar2_solve_leaves_no_backtrack_limit_behind(tmp_path):
    """toulbar2's options are process-wide: a solve held to a few backtracks
    (under a second) must not hold the next problem of the process, built
    elsewhere (an outside solver's test, a user's own pytoulbar2), to them."""
    import pytoulbar2

    from maxshard.search import toulbar2, toulbar2_limits

    inst = generated(tmp_path, 6, nodes=200, max_strategies=8, forbidden=0.0, functional=0.0)
    model = reduce(inst)
    cfn = toulbar2.build(model, model.unary, 0, None, memory=False)
    with toulbar2_limits.budget(cfn, 0.01):
        held = cfn.Option.backtrackLimit
    assert held < toulbar2_limits.NO_LIMIT, "precondition: the solve is held"
    toulbar2.solve_quietly(toulbar2.build(model, model.unary, 0, None, memory=False), 0.01)
    assert pytoulbar2.CFN(verbose=-1).Option.backtrackLimit == toulbar2_limits.NO_LIMIT


def test_a_toulbar2_solve_out_of_time_before_its_search_finds_nothing(tmp_path, monkeypatch):
    """toulbar2 raises ``SolverOut`` when its time runs out in preprocessing
    (VAC on a restarted search, with a second left): that is a search that
    found nothing, not a failed backend."""
    from pytoulbar2.pytb2 import SolverOut

    from maxshard.search import toulbar2

    inst = generated(tmp_path, 6, nodes=200, max_strategies=8, forbidden=0.0, functional=0.0)
    model = reduce(inst)

    def out_of_time(*_args, **_kw):
        raise SolverOut()

    for quietly in (False, True):
        cfn = toulbar2.build(model, model.unary, 0, None, memory=False)
        monkeypatch.setattr(cfn, "Solve", out_of_time)
        if quietly:
            assert toulbar2.solve_quietly(cfn, 1.0) is None
        else:
            assert toulbar2.run(cfn, model.nv, 1, lambda _x: None) == (False, None)


def test_toulbar2_knapsacks_list_each_binding_point_s_nonzero_usages():
    from maxshard.knapsack import binding_knapsacks
    from maxshard.model import Model
    from maxshard.search import toulbar2

    # three variables live at two points: the third's first value uses nothing
    model = Model(
        dom_off=np.array([0, 2, 5, 7]), unary=np.zeros(7, dtype=np.int64),
        edge_u=np.zeros(0, dtype=np.int64), edge_v=np.zeros(0, dtype=np.int64),
        edge_off=np.zeros(1, dtype=np.int64), edge_cost=np.zeros(0, dtype=np.int64),
        point_time=np.array([0, 1]), base=np.array([0, 0]), limit=9,
        term_var=np.array([0, 1, 2, 2]), term_lo=np.array([0, 0, 0, 1]),
        term_hi=np.array([2, 2, 1, 2]), term_off=np.array([0, 2, 5, 7, 9]),
        term_usage=np.array([2, 4, 2, 6, 8, 0, 4, 0, 6]), offset=0,
        node_var=np.arange(3), node_fixed=np.full(3, -1), map_off=np.array([0, 2, 5, 7]),
        node_map=np.array([0, 1, 0, 1, 2, 0, 1]),
    )  # fmt: skip
    # the flat writer agrees with its twin, the one lns uses one knapsack at a time
    expected = [
        (k.variables.tolist(), toulbar2.knapsack_params(k.room, k.weights))
        for k in binding_knapsacks(model)
    ]
    assert len(expected) == 2, "precondition: memory binds at both points"
    # usages in units of their gcd, 2: room 9 // 2 = 4
    assert expected[0] == ([0, 1, 2], "-4 2 0 -1 1 -2 3 0 -1 1 -3 2 -4 1 1 -2")
    assert list(toulbar2.knapsacks(model)) == expected
