import time

import numpy as np
import pytest

from maxshard.backend import Context
from maxshard.backends import lns
from maxshard.backends.lns import LNS, Price
from maxshard.evaluate import evaluate
from maxshard.reader import read_instance
from maxshard.reduce import reduce
from maxshard.search import neighbourhood
from maxshard.search.local import Search
from maxshard.search.neighbourhood import Adjacency, Room, improve, priced

from .conftest import brute_force, generated, reduced, write_problem


def _memory_model(tmp_path, seed: int, **kwargs):
    """A generated instance and its presolved model, which must keep a memory
    constraint."""
    inst = generated(tmp_path, seed, **kwargs)
    model = reduced(inst)
    if model.limit is None or not len(model.base):
        pytest.fail("precondition failed: no memory constraint left after presolve")
    return inst, model


@pytest.mark.parametrize("seed", range(8))
def test_room_overflows_exactly_where_memory_does(tmp_path, seed):
    """For a free set and any values of it, the knapsacks (every row, also
    those left for later) are overflowed exactly when the whole solution no
    longer fits; the rows dropped as unable to overflow never are."""
    _, model = _memory_model(tmp_path, seed, nodes=40, max_strategies=4, tightness=0.1)
    rng = np.random.default_rng(seed)
    x = model.min_usage_solution()
    if not model.fits(x):
        pytest.fail("precondition failed: nothing fits")
    graph = Adjacency(model)
    outcomes = set()
    for _ in range(20):
        free = np.sort(rng.choice(model.nv, min(model.nv, 8), replace=False))
        room = Room(model, graph, x, model.load(x), free)
        for _ in range(20):
            y = rng.integers(0, model.dom_size[free])
            trial = x.copy()
            trial[free] = y
            fits = model.fits(trial)
            assert (len(room.overflowed(y)) > 0) == (not fits)
            outcomes.add(fits)
    assert outcomes == {True, False}  # both cases met


@pytest.mark.parametrize("tightest", [0, 16])
@pytest.mark.parametrize("seed", range(3))
def test_lns_freeing_everything_finds_the_optimum(tmp_path, monkeypatch, seed, tightest):
    """With a neighbourhood as large as the model, one solve is exact; with no
    knapsack posted up front, every one needed must come lazily."""
    monkeypatch.setattr(neighbourhood, "TIGHTEST", tightest)
    inst = generated(tmp_path, seed, nodes=7, forbidden=0.0, tightness=0.4)
    best, _ = brute_force(inst)
    if best is None:
        pytest.fail("precondition failed: no clean solution fits")
    model = reduced(inst)
    backend = LNS()
    backend.size = backend.smallest = model.nv
    backend.priced_share = 0.0  # exact moves only: one of them frees everything
    reports = []
    result = backend.solve(model, time.monotonic() + 2.5, None, reports.append, seed)
    for x in [*reports, result.solution]:
        assert evaluate(inst, model.reconstruct(x)).feasible
    assert evaluate(inst, model.reconstruct(result.solution)).cost == best


@pytest.mark.parametrize("seed", range(4))
def test_lns_reports_fitting_solutions_each_cheaper_than_the_last(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=200, max_strategies=5, tightness=0.3)
    model = reduced(inst)
    start = model.min_usage_solution()
    reports = []
    result = LNS().solve(model, time.monotonic() + 2.5, start, reports.append, seed)
    costs = [model.cost(x) for x in reports]
    assert reports and costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)
    assert costs[-1] < model.cost(start)  # min-usage is far from the optimum here
    for x in [*reports, result.solution]:
        ev = evaluate(inst, model.reconstruct(x))
        assert ev.feasible and model.fits(x)


def test_lns_adopts_a_better_solution_from_another_worker(tmp_path):
    inst = generated(tmp_path, 5, nodes=400, max_strategies=4, tightness=0.3)
    model = reduced(inst)
    from maxshard.backends.local import LocalSearch

    better = LocalSearch().solve(model, time.monotonic() + 0.5, None, lambda x: None, 0).solution
    start = model.min_usage_solution()
    assert model.cost(better) < model.cost(start)

    class Report(Context):
        given = False

        def best(self):  # the orchestrator's shared best, offered once
            if self.given:
                return None
            self.given = True
            return better

    result = LNS().solve(model, time.monotonic() + 1.6, start, Report(), 0)
    assert model.cost(result.solution) <= model.cost(better)


def _trade(tmp_path):
    """Two nodes live at the same time, no edge, limit 10. Node a costs 10 at
    usage 5 or 0 at usage 8; node b costs 0 at usage 5 or 1 at usage 2. From
    (0, 0) (cost 10, load 10) the optimum (1, 1) (cost 1, load 10) needs both
    to change: a alone overflows, so a neighbourhood of a alone, with the room
    b leaves it, has nothing better."""
    problem = {
        "problem": {
            "name": "trade",
            "nodes": {
                "intervals": [[0, 1], [0, 1]],
                "costs": [[10, 0], [0, 1]],
                "usages": [[5, 8], [5, 2]],
            },
            "edges": {"nodes": [], "costs": []},
            "usage_limit": 10,
        }
    }
    inst = read_instance(write_problem(tmp_path / "trade.json", problem))
    model = reduce(inst)
    assert model.nv == 2  # presolve keeps both: neither value dominates
    return inst, model


def test_priced_move_trades_memory_with_variables_outside_the_neighbourhood(tmp_path):
    inst, model = _trade(tmp_path)
    # the model's variables follow the nodes; find a's
    a = int(model.node_var[0])
    x = np.array([0, 0], dtype=np.int64)
    x[a] = int(np.flatnonzero(model.node_map[model.map_off[0] : model.map_off[1]] == 0)[0])
    x[1 - a] = int(np.flatnonzero(model.node_map[model.map_off[1] : model.map_off[2]] == 0)[0])
    assert model.cost(x) == 10 and model.fits(x)
    graph, free = Adjacency(model), np.array([a])
    deadline = time.monotonic() + 5
    assert improve(model, graph, x, model.load(x), free, 0, deadline) is None
    rng = np.random.default_rng(0)
    search = Search(model, 0)
    load = model.load(x)
    pen = Price(model, model.cost(x)).penalties(1.0, load)  # a unit of usage costs 1
    y = priced(model, graph, search, x, free, pen, rng, deadline)
    assert y is not None and model.fits(y) and model.cost(y) == 1
    assert evaluate(inst, model.reconstruct(y)).cost == 1
    # priced so high that using more memory never pays: nothing cheaper at that price
    dear = Price(model, model.cost(x)).penalties(100.0, load)
    assert priced(model, graph, search, x, free, dear, rng, deadline) is None


def test_price_follows_the_draws_that_gained(tmp_path):
    _, model = _trade(tmp_path)
    price = Price(model, 10**6)
    start, slack = price.centre()
    assert start == pytest.approx(2 * 10**6 / model.limit)
    assert slack == pytest.approx(2**price.SLACK_START)
    rng = np.random.default_rng(0)
    for _ in range(200):
        lam, drawn, step = price.draw(rng, 1)
        assert start / 2**1.5 - 1e-9 <= lam <= start * 2**1.5 + 1e-9
        assert slack / 2**price.SLACK_SPREAD - 1e-9 <= drawn <= 1.0
        # a neighbourhood of the whole model: every point priced, the slack not learned
        _, drawn, step = price.draw(rng, model.nv)
        assert drawn == 1.0 and step[1] == 0.0
    up = np.array([1.0, 1.0])
    price.learn(up, 100)  # a gain above the centre: the centre rises by RATE * step
    assert price.centre() == pytest.approx((start * 2**price.RATE, slack * 2**price.RATE))
    price.learn(-up, 100)  # as large a gain below it: back where it was
    assert price.centre() == pytest.approx((start, slack))
    for _ in range(18):
        price.learn(np.zeros(2), 100)
    price.learn(np.array([1.0, 0.0]), 10**9)  # an outsized gain moves it 4 steps' worth
    assert price.centre() == pytest.approx((start * 2 ** (4 * price.RATE), slack))
    price.learn(np.array([0.0, 3.0]), 10**9)  # the slack never passes the whole limit
    assert price.centre()[1] == 1.0
    pen = price.penalties(2.0, model.base)
    # each value pays the price times its usage over its term's share of the points
    for k in range(len(model.term_var)):
        v = model.term_var[k]
        share = (model.term_hi[k] - model.term_lo[k]) / len(model.base)
        got = pen[model.dom_off[v] : model.dom_off[v + 1]]
        assert np.array_equal(got, np.floor(2.0 * share * model.usage_of(k)).astype(np.int64))


def test_memory_is_priced_only_where_the_load_comes_within_the_slack_of_the_limit(tmp_path):
    model = reduced(generated(tmp_path, 4, nodes=80, tightness=0.6))
    if model.limit is None or len(model.base) < 2:
        pytest.fail("precondition failed: no memory constraint over several points after presolve")
    x = model.min_usage_solution()
    load = model.load(x)
    price = Price(model, model.cost(x))
    everywhere = price.penalties(3.0, load)
    mixed = 0
    # none, the points loaded above the median, all
    for slack in (0.0, 1 - float(np.median(load)) / model.limit, 1.0):
        tight = load >= (1 - slack) * model.limit
        pen = price.penalties(3.0, load, slack)
        assert (pen <= everywhere).all()
        want = np.zeros(len(pen))
        for k in range(len(model.term_var)):  # each value: over its variable's terms
            v = model.term_var[k]
            share = tight[model.term_lo[k] : model.term_hi[k]].sum() / len(model.base)
            want[model.dom_off[v] : model.dom_off[v + 1]] += 3.0 * share * model.usage_of(k)
        assert np.array_equal(pen, np.floor(want).astype(np.int64))
        far = np.bincount(model.term_var, minlength=model.nv) > 0  # variables with terms
        held = far.sum()
        for k in range(len(model.term_var)):  # ... whose terms miss every tight point
            far[model.term_var[k]] &= not tight[model.term_lo[k] : model.term_hi[k]].any()
        for v in np.flatnonzero(far):  # memory where the load is far below the limit is free
            assert not pen[model.dom_off[v] : model.dom_off[v + 1]].any()
        assert slack < 1 or not far.any()  # the whole limit: every point priced
        mixed += 0 < far.sum() < held
    assert mixed  # a slack that prices some variables and not others
    assert np.array_equal(price.penalties(3.0, load, 1.0), everywhere)


@pytest.mark.parametrize("tree_share", [0.0, 1.0])
@pytest.mark.parametrize("seed", range(3))
def test_priced_moves_alone_report_fitting_ever_cheaper_solutions(
    tmp_path, monkeypatch, seed, tree_share
):
    """Priced moves on walks solved by toulbar2, or on induced trees solved by
    dynamic programming: every report fits and is cheaper than the last."""
    inst, model = _memory_model(tmp_path, seed, nodes=300, max_strategies=5, tightness=0.2)
    start = model.min_usage_solution()
    trees, walks = [], []

    def counting(move, seen):
        def counted(*args, **kw):
            seen.append(1)
            return move(*args, **kw)

        return counted

    monkeypatch.setattr(lns, "tree_priced", counting(lns.tree_priced, trees))
    monkeypatch.setattr(lns, "priced", counting(lns.priced, walks))
    backend = LNS()
    backend.priced_share, backend.tree_share = 1.0, tree_share
    reports = []
    result = backend.solve(model, time.monotonic() + 2.5, start, reports.append, seed)
    costs = [model.cost(x) for x in reports]
    assert reports and costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)
    assert costs[-1] < model.cost(start)
    assert bool(trees) == (tree_share > 0) and bool(walks) == (tree_share < 1)
    for x in [*reports, result.solution]:
        assert evaluate(inst, model.reconstruct(x)).feasible and model.fits(x)


def test_a_sub_second_toulbar2_solve_is_held_to_that_many_seconds_of_backtracks(tmp_path):
    """toulbar2's time limit is whole seconds: a solve given less (the tail of
    a budget, as lns's last moves) gets a backtrack limit from the rate of a
    deterministic run and keeps to it; a solve of a second or more has none."""
    from maxshard import work
    from maxshard.search import toulbar2, toulbar2_limits

    model = reduced(generated(tmp_path, 3, nodes=600, max_strategies=8, tightness=1.0))
    unary = model.unary.astype(np.int64)
    cfn = toulbar2.build(model, unary, seed=0, ub=None, memory=False)
    for seconds in (0.01, 1e-6):  # the second: a limit of one backtrack
        left = (seconds - toulbar2_limits.setup(cfn)) * work.RATES["tb2-node"]
        expected = max(1, int(left / (3 * toulbar2_limits.node_price(cfn))))
        with toulbar2_limits.budget(cfn, seconds) as limit:
            assert limit == 1 and cfn.Option.backtrackLimit == expected
    toulbar2.solve_quietly(cfn, 1e-6)
    assert cfn.GetNbBacktracks() <= 2  # (the backtrack that reaches the limit counts)
    with toulbar2_limits.budget(cfn, 1) as limit:
        assert limit == 1 and cfn.Option.backtrackLimit == toulbar2_limits.NO_LIMIT
    free = toulbar2.build(model, unary, seed=0, ub=None, memory=False)
    toulbar2.solve_quietly(free, 1)
    assert free.GetNbBacktracks() > 2  # the limit cut the search short


def test_lns_solves_every_neighbourhood_with_its_own_search_method(tmp_path, monkeypatch):
    """Every neighbourhood's solve, exact or priced, searches as :data:`neighbourhood.HBFS`
    says, whatever another search in the process left (toulbar2's options are
    process-wide; before each problem set its own, the first solves here ran
    with what an earlier search had left)."""
    from maxshard.search import toulbar2

    methods = []
    real = toulbar2.solve_quietly

    def solve(cfn, seconds):
        methods.append(cfn.Option.hbfs)
        return real(cfn, seconds)

    monkeypatch.setattr(toulbar2, "solve_quietly", solve)
    model = reduced(generated(tmp_path, 4, nodes=400, max_strategies=6, tightness=0.3))
    toulbar2.new_problem(None, 0, hbfs=1 - neighbourhood.HBFS)  # another search's choice
    LNS().solve(model, time.monotonic() + 2.0, model.min_usage_solution(), lambda x: None, 0)
    assert len(methods) > 10 and set(methods) == {neighbourhood.HBFS}


def test_lns_searches_up_to_its_deadline_and_keeps_it(tmp_path):
    """No margin of a whole sub-solve before the deadline any more: the moves go
    on to within :data:`lns.TAIL` of it; the last one's solve is held to the
    time left by backtracks, and at worst by toulbar2's one-second limit (the
    orchestrator ends a stage at its time whatever its workers do)."""
    inst = generated(tmp_path, 4, nodes=400, max_strategies=6, tightness=0.3)
    model = reduced(inst)
    start = time.monotonic()
    deadline = start + 2.0
    result = LNS().solve(model, deadline, model.min_usage_solution(), lambda *a, **k: None, 0)
    ended = time.monotonic()
    assert result.solution is not None and model.fits(result.solution)
    assert deadline - 2 * lns.TAIL <= ended <= deadline + 1.5, ended - start


def test_a_walk_is_a_breadth_first_ball():
    """On a chain of variables a walk's picks are consecutive (a ball around its
    root, cut at the chain's ends); on separate chains it goes on from a new
    root once its chain runs out, and it never picks more than asked."""
    from types import SimpleNamespace

    from maxshard.search.neighbourhood import Adjacency

    def chains(lengths):
        u, v, start = [], [], 0
        for n in lengths:
            u += list(range(start, start + n - 1))
            v += list(range(start + 1, start + n))
            start += n
        empty = np.zeros(0, dtype=np.int64)
        return SimpleNamespace(
            nv=start, m=len(u), edge_u=np.array(u), edge_v=np.array(v),
            term_var=empty, term_usage=empty, term_off=np.zeros(1, dtype=np.int64),
        )  # fmt: skip

    graph = Adjacency(chains([50]))
    rng = np.random.default_rng(0)
    for size in (1, 7, 20, 49, 50, 80):
        picked = graph.walk(rng, size)
        assert len(picked) == min(size, 50) and len(set(picked.tolist())) == len(picked)
        assert np.all(np.diff(picked) == 1)  # consecutive
    graph = Adjacency(chains([5, 5, 5]))
    picked = graph.walk(rng, 12)
    assert len(picked) == 12
    full = [c for c in range(3) if set(range(5 * c, 5 * c + 5)) <= set(picked.tolist())]
    assert len(full) == 2  # two chains whole, then part of the third


def test_a_walk_on_a_connected_graph_is_a_ball_around_some_root():
    """Every variable nearer its root than the farthest pick is picked."""
    from collections import deque
    from types import SimpleNamespace

    from maxshard.search.neighbourhood import Adjacency

    rng = np.random.default_rng(1)
    n = 40
    u = [int(rng.integers(k)) for k in range(1, n)] + rng.integers(0, n, 15).tolist()
    v = list(range(1, n)) + rng.integers(0, n, 15).tolist()
    pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(u, v, strict=True) if a != b})
    empty = np.zeros(0, dtype=np.int64)
    model = SimpleNamespace(
        nv=n, m=len(pairs), edge_u=np.array([a for a, _ in pairs]),
        edge_v=np.array([b for _, b in pairs]),
        term_var=empty, term_usage=empty, term_off=np.zeros(1, dtype=np.int64),
    )  # fmt: skip
    graph = Adjacency(model)
    adj = {k: set() for k in range(n)}
    for a, b in pairs:
        adj[a].add(b)
        adj[b].add(a)

    def distances(root):
        dist, queue = {root: 0}, deque([root])
        while queue:
            a = queue.popleft()
            for b in adj[a] - dist.keys():
                dist[b] = dist[a] + 1
                queue.append(b)
        return dist

    def ball(picked, root):
        dist = distances(root)
        radius = max(dist[p] for p in picked)
        return all(p in picked for p, d in dist.items() if d < radius)

    for _ in range(20):
        picked = set(graph.walk(rng, 15).tolist())
        assert len(picked) == 15
        assert any(ball(picked, r) for r in picked)


def test_the_choice_of_price_follows_the_way_that_gains():
    rng = np.random.default_rng(0)

    def share(choice):  # of the multipliers, over many draws
        return np.mean([choice.draw(rng) == lns.Choice.MULTIPLIERS for _ in range(4000)])

    choice = lns.Choice()
    assert share(choice) == pytest.approx(0.5, abs=0.04)  # nothing learned: even
    for _ in range(20):
        choice.learn(lns.Choice.MULTIPLIERS, True)
        choice.learn(lns.Choice.OWN, False)
    assert share(choice) == pytest.approx(1 - choice.floor, abs=0.03)  # never all one way
    for _ in range(60):
        choice.learn(lns.Choice.MULTIPLIERS, False)
        choice.learn(lns.Choice.OWN, True)
    assert share(choice) == pytest.approx(choice.floor, abs=0.03)
    early = lns.Choice()  # 2 of 3 gained against 0 of 1: rates 3/5 and 1/3, cubed
    for gained in (True, False, True):
        early.learn(lns.Choice.MULTIPLIERS, gained)
    early.learn(lns.Choice.OWN, False)
    assert share(early) == pytest.approx(0.6**3 / (0.6**3 + (1 / 3) ** 3), abs=0.03)


@pytest.mark.parametrize("seed", range(2))
def test_moves_priced_by_handed_multipliers_report_fitting_ever_cheaper_solutions(
    tmp_path, monkeypatch, seed
):
    """Given a Lagrangian loop's multipliers, priced moves price memory with
    them too: every report fits and is cheaper than the last."""
    inst, model = _memory_model(tmp_path, seed, nodes=300, max_strategies=5, tightness=0.2)
    start = model.min_usage_solution()
    # multipliers of a plausible scale: the start's cost per unit of the limit, spread
    scale = model.cost(start) / model.limit / len(model.base)
    handed = np.random.default_rng(seed).random(len(model.base)) * scale
    choices = []

    class Counted(lns.Choice):
        def __init__(self):
            super().__init__()
            choices.append(self)

    monkeypatch.setattr(lns, "Choice", Counted)
    backend = LNS()
    backend.priced_share = 1.0
    reports = []
    ctx = Context(lambda x=None, lower_bound=None: reports.append(x), multipliers=handed)
    result = backend.solve(model, time.monotonic() + 2.5, start, ctx, seed)
    costs = [model.cost(x) for x in reports]
    assert reports and costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)
    for x in [*reports, result.solution]:
        assert evaluate(inst, model.reconstruct(x)).feasible and model.fits(x)
    assert len(choices) == 1 and choices[0].tries[lns.Choice.MULTIPLIERS] > 0
    # multipliers of the wrong length (another model's) are not used
    choices.clear()
    ctx = Context(lambda x=None, lower_bound=None: None, multipliers=np.ones(len(model.base) + 1))
    backend.solve(model, time.monotonic() + 0.5, start, ctx, seed)
    assert not choices
