"""Exact backends against brute force; plugin loading; fallback under the deadline."""

import time
from importlib.metadata import EntryPoint

import numpy as np
import pytest

from maxshard import backend as backends
from maxshard.backend import GROUP, BackendError, Capabilities, Result, Status, shared_best
from maxshard.evaluate import evaluate
from maxshard.orchestrate import Best, run_backends
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
    result = backends.load(name).solve(model, time.monotonic() + 30, None, found, seed)
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
    from maxshard.orchestrate import solve

    unavoidable = 0
    for seed in range(16):
        tight = (-0.1, 0.0, 0.2, 0.5)[seed % 4]
        inst = generated(tmp_path, seed, nodes=7, forbidden=0.1 * (seed % 3), tightness=tight)
        expected = contest_optimum(inst)
        if expected is None or not expected[0]:
            continue
        unavoidable += 1
        # the default plan's answer is that optimum too, proved
        best = solve(inst, time.monotonic() + 5, lambda _m: None)
        assert (best.evaluation.forbidden, best.evaluation.cost) == expected
        assert best.status == "optimal" and best.lower_bound == expected[1]
    assert unavoidable >= 3


class Hang:
    name = "hang"
    capabilities = Capabilities(exact=False, anytime=False, memory=False, lower_bound=False)

    def solve(self, model, deadline, incumbent, report, seed=0):
        time.sleep(3600)


class Crash(Hang):
    name = "crash"

    def solve(self, model, deadline, incumbent, report, seed=0):
        raise RuntimeError("boom")


class Dies(Hang):
    """Its process ends without a result (as a segmentation fault would end it)."""

    name = "dies"

    def solve(self, model, deadline, incumbent, report, seed=0):
        import os

        os._exit(1)


class Optimal(Hang):
    name = "optimal"

    def solve(self, model, deadline, incumbent, report, seed=0):
        return Result(Status.OPTIMAL, incumbent, model.cost(incumbent))


class Bounding(Hang):
    name = "bounding"

    def solve(self, model, deadline, incumbent, report, seed=0):
        report(lower_bound=model.cost(incumbent) - 5)  # streamed, then a proof
        report(lower_bound=model.cost(incumbent))
        time.sleep(3600)


class Overbounding(Hang):
    """A broken backend: claims a bound above the incumbent's cost."""

    name = "overbounding"

    def solve(self, model, deadline, incumbent, report, seed=0):
        report(lower_bound=model.cost(incumbent) + 1)
        time.sleep(3600)


class Finder(Hang):
    """Improves the incumbent by a descent after a moment, reports it, and waits."""

    name = "finder"

    def solve(self, model, deadline, incumbent, report, seed=0):
        from maxshard.backends.local import Search

        time.sleep(0.3)
        search = Search(model, seed)
        search.reset(incumbent)
        search.descend(deadline)
        report(search.x.copy())
        time.sleep(3600)


class Stateful(Hang):
    """Improves the incumbent and shares a state; a copy restarted from that state
    reports the bound written in it (so the test sees what was inherited)."""

    name = "stateful"

    def solve(self, model, deadline, incumbent, report, seed=0):
        inherited = backends.inherited_state(report)
        if inherited is not None:
            # less what the restarted worker had handed over as its own backend
            previous = backends.previous_state(report) or {"mark": 0}
            report(lower_bound=inherited["bound"] - previous["mark"])
        else:
            from maxshard.backends.local import Search

            search = Search(model, seed)
            search.reset(incumbent)
            search.descend(deadline)
            report(search.x.copy())
            backends.share_state(report, {"bound": model.cost(search.x) - 7})
        time.sleep(3600)


class Marker(Hang):
    """Hands over a state of its own, then waits."""

    name = "marker"

    def solve(self, model, deadline, incumbent, report, seed=0):
        backends.share_state(report, {"mark": 1})
        time.sleep(3600)


class Listener(Hang):
    """Waits for a better solution from another worker; proves its cost a bound."""

    name = "listener"

    def solve(self, model, deadline, incumbent, report, seed=0):
        start_cost = model.cost(incumbent)
        while time.monotonic() < deadline:
            x = shared_best(report)
            if x is not None and model.cost(x) < start_cost:
                report(lower_bound=model.cost(x))
            time.sleep(0.01)
        return Result(Status.UNKNOWN)


@pytest.fixture
def fake_plugins(monkeypatch):
    real = backends.available()
    fakes = {
        "hang": EntryPoint("hang", "tests.test_backends:Hang", GROUP),
        "crash": EntryPoint("crash", "tests.test_backends:Crash", GROUP),
        "dies": EntryPoint("dies", "tests.test_backends:Dies", GROUP),
        "optimal": EntryPoint("optimal", "tests.test_backends:Optimal", GROUP),
        "bounding": EntryPoint("bounding", "tests.test_backends:Bounding", GROUP),
        "finder": EntryPoint("finder", "tests.test_backends:Finder", GROUP),
        "overbounding": EntryPoint("overbounding", "tests.test_backends:Overbounding", GROUP),
        "listener": EntryPoint("listener", "tests.test_backends:Listener", GROUP),
        "stateful": EntryPoint("stateful", "tests.test_backends:Stateful", GROUP),
        "marker": EntryPoint("marker", "tests.test_backends:Marker", GROUP),
        "missing": EntryPoint("missing", "no_such_module_xyz:Backend", GROUP),
    }
    monkeypatch.setattr(backends, "available", lambda: {**real, **fakes})


def test_unknown_and_broken_backends_are_clear_errors(fake_plugins):
    with pytest.raises(BackendError, match="unknown backend 'nope' .*known: .*local"):
        backends.load("nope")
    with pytest.raises(BackendError, match="failed to load: ModuleNotFoundError"):
        backends.load("missing")


@pytest.mark.parametrize("plan", [["hang"], ["crash"], ["missing"], ["crash", "hang"]])
def test_failing_backends_leave_the_incumbent_standing(tmp_path, fake_plugins, plan):
    inst = generated(tmp_path, 4, nodes=40, tightness=0.3)
    model = reduce(inst)
    best = Best(inst, lambda msg: None)
    x = model.min_usage_solution()
    assert best.offer(model.reconstruct(x), "start", x)
    start = time.monotonic()
    outcome = run_backends(model, best, plan, start + 1.0)
    assert time.monotonic() - start < 1.5
    assert best.solution is not None and evaluate(inst, best.solution).feasible
    assert set(outcome) == set(plan)
    assert "crash" not in outcome or "boom" in outcome["crash"]


def test_a_worker_that_dies_is_reported_and_one_that_fails_is_not_called_crashed(
    tmp_path, fake_plugins
):
    inst = generated(tmp_path, 4, nodes=40, tightness=0.3)
    model = reduce(inst)
    lines: list[str] = []
    best = Best(inst, lines.append)
    outcome = run_backends(model, best, ["dies", "crash"], time.monotonic() + 2.0, workers=2)
    assert outcome["dies"] == "crashed" and outcome["crash"] == "error: RuntimeError: boom"
    crashed = [line for line in lines if "crashed" in line]
    assert crashed == ["backend dies crashed (its process ended without a result)"]


def _started(tmp_path, log=lambda _m: None):
    """A small clean instance, its model, and a Best holding the model's
    least-usage solution (offered as "start"), which the tests' fakes improve on."""
    inst = generated(tmp_path, 4, nodes=40, tightness=0.3, forbidden=0.0, functional=0.0)
    model = reduce(inst)
    best = Best(inst, log)
    x = model.min_usage_solution()
    best.offer(model.reconstruct(x), "start", x)
    return inst, model, best, x


@pytest.mark.parametrize("leader_runs", [True, False])
def test_workers_behind_restart_as_the_leader_at_the_switch(tmp_path, fake_plugins, leader_runs):
    lines: list[str] = []
    _, model, best, _ = _started(tmp_path, lines.append)
    # "finder" improves on the start within 0.3 s; without it, "start" leads: no backend
    plan = ["hang", "finder"] if leader_runs else ["hang", "crash"]
    start = time.monotonic()
    run_backends(model, best, plan, start + 2.0, workers=2, switch=0.5)
    assert time.monotonic() - start < 2.5
    restarts = [line for line in lines if "restarts as" in line]
    assert restarts == (
        ["hang restarts as finder, which found the best so far"] if leader_runs else []
    )
    assert best.method == ("finder" if leader_runs else "start")
    # each worker's own best is logged at the switch: only the finder reported one
    switch = [line for line in lines if line.startswith("at the switch")]
    if leader_runs:
        own = model.cost(best.model_x)  # the copy restarted at the switch found no better
        assert switch == [f"at the switch, each worker's best: finder {own:.6g}"]
    else:
        assert switch == []


@pytest.mark.parametrize(("behind", "less"), [("hang", 7), ("marker", 8)])
def test_a_worker_restarted_as_the_leader_inherits_its_state(tmp_path, fake_plugins, behind, less):
    """The copy restarted at the switch gets the leader's state, and (a marker
    before it) its own last state too."""
    _, model, best, _ = _started(tmp_path)
    start = time.monotonic()
    run_backends(model, best, [behind, "stateful"], start + 2.0, workers=2, switch=0.5)
    assert best.method == "stateful"
    # only the copy restarted from the leader's state reports this bound, less its own mark
    assert best.lower_bound == best.evaluation.cost - less


def test_optimal_backend_stops_the_run_early(tmp_path, fake_plugins):
    _, model, best, x = _started(tmp_path)
    start = time.monotonic()
    run_backends(model, best, ["optimal", "hang"], start + 5, workers=1)
    assert time.monotonic() - start < 2 and best.status == "optimal"
    assert best.lower_bound == model.cost(x)


def test_streamed_bounds_are_kept_and_a_matching_one_ends_the_run(tmp_path, fake_plugins):
    messages = []
    _, model, best, x = _started(tmp_path, messages.append)
    start = time.monotonic()
    outcome = run_backends(model, best, ["bounding"], start + 5)
    assert time.monotonic() - start < 2 and best.status == "optimal"
    assert best.lower_bound == model.cost(x) == best.evaluation.cost
    assert any("bound by bounding" in m for m in messages)
    assert outcome == {"bounding": "stopped: proved"}


def test_a_bound_above_a_checked_answer_is_ignored_not_a_proof(tmp_path, fake_plugins):
    messages = []
    _, model, best, x = _started(tmp_path, messages.append)
    start = time.monotonic()
    run_backends(model, best, ["overbounding"], start + 1.5)
    assert time.monotonic() - start > 1.2 and best.status == "feasible"
    assert best.lower_bound is None and best.evaluation.cost == model.cost(x)
    assert any("claimed the lower bound" in m and "ignored" in m for m in messages)
    # a bound that an answer found later undercuts is dropped, not kept
    from maxshard.backends.local import Search

    best.lower_bound = best.evaluation.cost  # as if a broken backend had "proved" the start
    search = Search(model, 0)
    search.reset(x)
    search.descend(time.monotonic() + 5)
    assert best.offer(model.reconstruct(search.x), "descent", search.x.copy())
    assert best.lower_bound is None and any("dropped" in m for m in messages)


def test_fully_presolved_instance_needs_no_backend(tmp_path):
    from maxshard.reader import read_instance

    from .conftest import write_problem

    p = {
        "problem": {
            "nodes": {
                "intervals": [[0, 2], [1, 3]],
                "costs": [[5], [7, 9]],
                "usages": [[1], [1, 1]],
            },
            "edges": {"nodes": [[0, 1]], "costs": [[3, 0]]},
        }
    }
    inst = read_instance(write_problem(tmp_path / "p.json", p))
    model = reduce(inst)
    assert model.nv == 0
    best = Best(inst, lambda msg: None)
    outcome = run_backends(model, best, ["local"], time.monotonic() + 5)
    assert best.status == "optimal" and best.evaluation.cost == 14 == best.lower_bound  # 5+9+0
    assert outcome == {"local": "not needed"}


def test_stages_run_in_turn_and_hand_on_the_incumbent(tmp_path, fake_plugins, monkeypatch):
    from maxshard import orchestrate

    inst = generated(tmp_path, 5, nodes=12, forbidden=0.0, tightness=0.4)
    model = reduce(inst)
    start_cost = evaluate(inst, model.reconstruct(model.min_usage_solution())).cost
    # "bounding" reports its incumbent's cost as a bound: that proves optimality
    # (and ends the run) only if it was handed the first stage's improvement
    stages = [orchestrate.Stage(["local"], 0.4), orchestrate.Stage(["bounding"], 0.6)]
    monkeypatch.setattr(orchestrate, "default_stages", lambda model, workers=2: stages)
    start = time.monotonic()
    best = orchestrate.solve(inst, start + 3.0, lambda _line: None)
    took = time.monotonic() - start
    assert best.evaluation.cost < start_cost
    assert best.status == "optimal" and best.lower_bound == best.evaluation.cost
    assert 1.0 < took < 2.2  # the first stage used its share (less the worker margin)


def test_a_solution_found_by_one_worker_reaches_another_while_both_run(tmp_path, fake_plugins):
    inst = generated(tmp_path, 7, nodes=60, forbidden=0.0, functional=0.0, tightness=0.3)
    model = reduce(inst)
    best = Best(inst, lambda msg: None)
    x = model.min_usage_solution()
    best.offer(model.reconstruct(x), "start", x)
    start = time.monotonic()
    outcome = run_backends(model, best, ["listener", "finder"], start + 10, workers=2)
    # the listener proved the finder's cost a bound only after receiving it
    assert time.monotonic() - start < 5
    assert (
        best.method == "finder" and best.evaluation.cost < evaluate(inst, model.reconstruct(x)).cost
    )
    assert best.status == "optimal" and best.lower_bound == best.evaluation.cost
    assert outcome == {"listener": "stopped: proved", "finder": "stopped: proved"}


def test_shared_best_is_new_solutions_only():
    from maxshard.orchestrate import Shared, WorkerReport

    shared = Shared(4)
    report = WorkerReport(None, shared)
    assert shared_best(report) is None  # nothing published yet
    shared.publish(np.array([1, 2, 3, 4]))
    assert shared_best(report).tolist() == [1, 2, 3, 4]
    assert shared_best(report) is None  # unchanged since the last call
    shared.publish(np.array([0, 0, 0, 1]))
    assert shared_best(report).tolist() == [0, 0, 0, 1]
    assert shared_best(lambda solution=None, lower_bound=None: None) is None  # plain callables


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
        result = backends.load(name).solve(model, time.monotonic() + 30, None, Recorder(), 0)
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
    result = backends.load("highs").solve(model, time.monotonic() + 60, None, found, 0)
    costs = [model.cost(x) for x in found.solutions]
    assert result.status is Status.OPTIMAL and costs[-1] == result.lower_bound
    assert len(costs) >= 3 and costs == sorted(costs, reverse=True)
    assert all(model.fits(x) for x in found.solutions)


def test_default_plan_gives_every_worker_a_backend():
    from types import SimpleNamespace

    from maxshard.orchestrate import (
        FINAL_POLISH,
        LEADER_SWITCH,
        Stage,
        default_plan,
        default_stages,
    )

    large = SimpleNamespace(base=np.zeros(5000), nv=5000)
    few_vars = SimpleNamespace(base=np.zeros(5000), nv=300)
    small = SimpleNamespace(base=np.zeros(400), nv=300)
    assert default_plan(large, 2) == ["lagrange", "lagrange-terms"]  # as measured on 2 cores
    assert default_plan(large, 8) == ["lagrange", "lagrange-terms", "local", "lagrange-terms"] * 2
    assert default_plan(few_vars, 2) == ["lagrange", "local"]
    assert default_plan(small, 1) == ["toulbar2"] and len(default_plan(small, 6)) == 6
    stages = default_stages(large, 4)
    assert stages[0] == Stage(default_plan(large, 4), 1 - FINAL_POLISH)  # local leads there
    assert default_stages(large, 2)[0] == Stage(
        default_plan(large, 2), 1 - FINAL_POLISH, LEADER_SWITCH
    )
    # the final stage: large neighbourhood search on two workers, then local search
    assert stages[-1] == Stage(["lns", "lns", "local", "lns"], FINAL_POLISH)
    assert default_stages(large, 2)[-1].backends == ["lns", "lns"]
    assert default_stages(large, 1)[-1].backends == ["lns"]
    assert default_stages(small, 3) == [Stage(default_plan(small, 3), 1.0)]


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
    from maxshard.backends import toulbar2

    inst = generated(
        tmp_path, 1, nodes=600, edges=2400, max_strategies=6, forbidden=0.0, functional=0.0
    )
    model = reduce(inst)
    bounds = []
    real = toulbar2.build
    monkeypatch.setattr(
        toulbar2, "build", lambda m, u, s, ub, **k: (bounds.append(ub), real(m, u, s, ub, **k))[1]
    )
    backend = toulbar2.Toulbar2()
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


@pytest.mark.parametrize("seed", range(8))
def test_toulbar2_restarted_still_proves_the_contest_optimum(tmp_path, monkeypatch, seed):
    """Its first search made to look stopped before its proof (as after a quiet
    spell), the search starts again below that answer: the proof that ends it
    makes the answer the contest's optimum (brute force; also where every
    answer has a forbidden pick, or nothing fits)."""
    from maxshard.backends import toulbar2

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


def test_toulbar2_initial_bound_cuts_off_nothing_cheaper():
    """Costs past 2**53 are not all doubles: the bound rounds up, never down."""
    from maxshard.backends.toulbar2 import upper_bound

    assert upper_bound(7) == 7.0
    for cost in (2**53 + 1, 3 * 2**60 + 5):
        assert upper_bound(cost) >= cost and upper_bound(cost) - cost <= 2**12
