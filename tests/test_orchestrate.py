"""The orchestrator: workers and their messages, stages and the leader switch,
proofs and gap stops, plans as data, and plugins joining a plan."""

import json
import signal
import subprocess
import sys
import time
from importlib.metadata import EntryPoint
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import maxshard
from maxshard import backend as backends
from maxshard import registry
from maxshard.backend import GROUP, BackendError, Capabilities, Result, Status, context, shared_best
from maxshard.evaluate import evaluate
from maxshard.orchestrate import Best, Options, Plan, Stage, built_in, run_backends, solve
from maxshard.orchestrate.pipeline import stages_for
from maxshard.orchestrate.plan import Case, PlanError, built_in_text, describe, load, parse
from maxshard.orchestrate.workers import Shared, WorkerContext
from maxshard.reader import read_instance
from maxshard.reduce import reduce

from .conftest import EXAMPLE, generated, write_problem

BIN = Path(sys.executable).parent


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
        context(report).hand_over({"mark": 1})
        time.sleep(3600)


class Listener(Hang):
    """Waits for a better solution from another worker; proves its cost a bound."""

    name = "listener"

    def solve(self, model, deadline, incumbent, report, seed=0):
        start_cost = model.cost(incumbent)
        while time.monotonic() < deadline:
            x = context(report).best()
            if x is not None and model.cost(x) < start_cost:
                report(lower_bound=model.cost(x))
            time.sleep(0.01)
        return Result(Status.UNKNOWN)


@pytest.fixture
def fake_plugins(monkeypatch):
    real = registry.available()
    fakes = {
        "hang": EntryPoint("hang", "tests.test_orchestrate:Hang", GROUP),
        "crash": EntryPoint("crash", "tests.test_orchestrate:Crash", GROUP),
        "dies": EntryPoint("dies", "tests.test_orchestrate:Dies", GROUP),
        "optimal": EntryPoint("optimal", "tests.test_orchestrate:Optimal", GROUP),
        "bounding": EntryPoint("bounding", "tests.test_orchestrate:Bounding", GROUP),
        "finder": EntryPoint("finder", "tests.test_orchestrate:Finder", GROUP),
        "overbounding": EntryPoint("overbounding", "tests.test_orchestrate:Overbounding", GROUP),
        "listener": EntryPoint("listener", "tests.test_orchestrate:Listener", GROUP),
        "stateful": EntryPoint("stateful", "tests.test_orchestrate:Stateful", GROUP),
        "marker": EntryPoint("marker", "tests.test_orchestrate:Marker", GROUP),
        "garbage": EntryPoint("garbage", "tests.test_orchestrate:Garbage", GROUP),
        "oldstyle": EntryPoint("oldstyle", "tests.test_orchestrate:OldStyle", GROUP),
        "missing": EntryPoint("missing", "no_such_module_xyz:Backend", GROUP),
    }
    monkeypatch.setattr(registry, "available", lambda: {**real, **fakes})


def test_unknown_and_broken_backends_are_clear_errors(fake_plugins):
    with pytest.raises(BackendError, match="unknown backend 'nope' .*known: .*local"):
        registry.load("nope")
    with pytest.raises(BackendError, match="failed to load: ModuleNotFoundError"):
        registry.load("missing")


def test_the_deadline_alarm_is_not_taken_for_a_broken_plugin(monkeypatch):
    """The alarm (SIGALRM's Interrupted) raised while a backend's module is
    importing stops the solve; it does not become a load error to skip."""
    from maxshard.driver import Interrupted, _interrupt

    def alarm_while_loading():
        _interrupt(signal.SIGALRM, None)

    entry = type("Entry", (), {"load": staticmethod(alarm_while_loading)})()
    monkeypatch.setattr(registry, "available", lambda: {"slow": entry})
    with pytest.raises(Interrupted, match="SIGALRM"):
        registry.load("slow")


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


def test_stages_run_in_turn_and_hand_on_the_incumbent(tmp_path, fake_plugins):
    inst = generated(tmp_path, 5, nodes=12, forbidden=0.0, tightness=0.4)
    model = reduce(inst)
    start_cost = evaluate(inst, model.reconstruct(model.min_usage_solution())).cost
    # "bounding" reports its incumbent's cost as a bound: that proves optimality
    # (and ends the run) only if it was handed the first stage's improvement
    plan = Plan("two", (Case((Stage(0.4, ("local",)), Stage(0.6, ("bounding",)))),))
    lines: list[str] = []
    start = time.monotonic()
    best = Best(inst, lines.append)
    solve(inst, start + 3.0, best, Options(plan=plan, workers=1))
    took = time.monotonic() - start
    assert best.evaluation.cost < start_cost
    assert best.status == "optimal" and best.lower_bound == best.evaluation.cost
    assert 1.0 < took < 2.2  # the first stage used its share (less the worker margin)
    stages = [line.split(":")[0] for line in lines if line.startswith("stage ")]
    assert [s.split(" until")[0] for s in stages] == ["stage 1/2", "stage 2/2"]


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
    shared = Shared(4)
    report = WorkerContext(None, shared)
    assert shared_best(report) is None  # nothing published yet
    shared.publish(np.array([1, 2, 3, 4]))
    assert shared_best(report).tolist() == [1, 2, 3, 4]
    assert shared_best(report) is None  # unchanged since the last call
    shared.publish(np.array([0, 0, 0, 1]))
    assert shared_best(report).tolist() == [0, 0, 0, 1]
    assert shared_best(lambda solution=None, lower_bound=None: None) is None  # plain callables


class OldStyle(Hang):
    """A plugin written against the first interface: the helper functions on
    ``report`` (shared_best, share_state), no context. Tries every assignment."""

    name = "oldstyle"

    def solve(self, model, deadline, incumbent, report, seed=0):
        import itertools

        start = shared_best(report)  # the run's best in model form, if it has one
        best = start if start is not None and model.fits(start) else None
        for values in itertools.product(*(range(int(d)) for d in model.dom_size)):
            x = np.array(values, dtype=np.int64)
            if model.fits(x) and (best is None or model.cost(x) < model.cost(best)):
                best = x
        backends.share_state(report, {"done": True})
        report(best)
        return Result(Status.OPTIMAL, best, model.cost(best))


def test_an_old_style_plugin_still_solves_the_example(fake_plugins):
    from maxshard.orchestrate import Run

    plan = Plan.of_backends(["oldstyle"], 1)
    run = Run(Options(plan=plan, workers=1, presolve=False), lambda _m: None)
    run.solve(EXAMPLE, time.monotonic() + 10)
    result = run.result()
    assert result.cost == 445 and result.status == "optimal" and result.method == "oldstyle"
    assert result.outcome == {"oldstyle": "optimal"}


class Garbage(Hang):
    """Reports a solution that is not one (wrong length, then values out of the
    domains), then sends a message the orchestrator does not know."""

    name = "garbage"

    def solve(self, model, deadline, incumbent, report, seed=0):
        report(np.zeros(model.nv + 3, dtype=np.int64))
        report(np.asarray(model.dom_size, dtype=np.int64))  # one past every domain
        report.conn.send(("nonsense", 1, 2))
        report.conn.send(("bound",))  # a bound without its value
        time.sleep(3600)


def test_a_worker_reporting_garbage_leaves_the_incumbent_standing(tmp_path, fake_plugins):
    lines: list[str] = []
    inst, model, best, x = _started(tmp_path, lines.append)
    start_cost = best.evaluation.cost
    outcome = run_backends(model, best, ["garbage"], time.monotonic() + 1.5, workers=1)
    assert outcome == {"garbage": "stopped at deadline"}
    assert best.method == "start" and best.evaluation.cost == start_cost
    assert best.lower_bound is None
    ignored = [line for line in lines if "ignored" in line]
    assert len(ignored) == 4 and sum("out of the model's domains" in line for line in ignored) == 2


# -- plans as data ------------------------------------------------------------------


def facts(points: int, variables: int) -> SimpleNamespace:
    """A stand-in model: what a plan's conditions read."""
    return SimpleNamespace(base=np.zeros(points), nv=variables)


LARGE, FEW_VARS, SMALL = facts(5000, 5000), facts(5000, 300), facts(400, 300)


def test_the_default_plan_gives_every_worker_a_backend():
    def stages(model, workers, seconds=180.0):
        return [
            (s.share, s.workers(workers), s.switch)
            for s in stages_for(Options(), model, workers, seconds)
        ]

    # as measured on 2 cores: the two loops with the switch, then lns twice
    assert stages(LARGE, 2) == [
        (0.6, ["lagrange", "lagrange-terms"], 0.5),
        (0.4, ["lns", "lns"], None),
    ]
    # beyond two workers: no switch; local search, more term-priced loops; lns, lns, local
    four = stages(LARGE, 4)
    assert four[0] == (0.6, ["lagrange", "lagrange-terms", "local", "lagrange-terms"], None)
    assert four[1] == (0.4, ["lns", "lns", "local", "lns"], None)
    assert stages(LARGE, 8)[0][1] == four[0][1] * 2
    assert stages(LARGE, 1) == [(0.6, ["lagrange"], None), (0.4, ["lns"], None)]
    # from 17 s on: the same stages at any budget (lns beside the loop from the
    # start, tried at 30-60 s, sank into poor basins once it had tree moves)
    for seconds in (17.0, 45.0, 61.0):
        assert stages(LARGE, 2, seconds) == stages(LARGE, 2)
    # up to 16 s: the loops for 35% of the time
    assert stages(LARGE, 2, 16.0) == [
        (0.35, ["lagrange", "lagrange-terms"], 0.5),
        (0.65, ["lns", "lns"], None),
    ]
    assert stages(LARGE, 3, 16.0)[0] == (0.35, ["lagrange", "lagrange-terms", "lagrange"], 0.5)
    assert stages(FEW_VARS, 2) == [(1.0, ["lagrange", "local"], None)]
    assert stages(SMALL, 1) == [(1.0, ["toulbar2"], None)]
    assert len(stages(SMALL, 6)[0][1]) == 6


def test_the_proving_plan_keeps_a_bounding_worker_on_large_models():
    """Past toulbar2's size the dual runs on one worker in every stage (its state
    carried on), the others search; small models keep the default plan, and
    so do budgets of at most 16 s (the ascent gets nowhere in it), of at most
    25 s on few variables (the loop bounds them sooner) and, on two workers,
    of at most 150 s (it costs the answers more than it bounds)."""

    def stages(model, workers, seconds=180.0):
        return [
            s.workers(workers) for s in stages_for(Options(prove=True), model, workers, seconds)
        ]

    assert stages(SMALL, 2) == [s.workers(2) for s in stages_for(Options(), SMALL, 2, 180.0)]
    assert stages_for(Options(prove=True), SMALL, 2, 30.0) == stages_for(Options(), SMALL, 2, 30.0)
    assert stages(LARGE, 2) == [["dual", "lagrange-terms", "lns"], ["dual", "lns", "local"]]
    # up to 150 s on two workers: the default plan (the ascent would take half
    # the search); beyond two workers a short first stage (at most 60 s) runs
    # the multiplier loop, which dives
    for seconds in (30.0, 50.0, 150.0):
        assert stages_for(Options(prove=True), LARGE, 2, seconds) == stages_for(
            Options(), LARGE, 2, seconds
        )
    assert stages(LARGE, 2, 151.0)[0] == ["dual", "lagrange-terms", "lns"]
    assert stages(LARGE, 5, 50.0)[0] == [
        "dual",
        "lagrange",
        "lagrange-terms",
        "local",
        "lagrange",
        "lns",
    ]
    # few variables: local search beside the ascent (A's and P's answers), then the loop;
    # in at most 25 s the default's case (the loop bounds them first)
    assert stages(FEW_VARS, 2) == [["dual", "local", "local"]]
    assert stages(FEW_VARS, 3) == [["dual", "local", "lagrange", "local"]]
    for seconds in (5.0, 25.0):
        assert stages_for(Options(prove=True), FEW_VARS, 2, seconds) == stages_for(
            Options(), FEW_VARS, 2, seconds
        )
    assert stages(FEW_VARS, 2, 26.0) == [["dual", "local", "local"]]
    assert stages(LARGE, 1) == [["dual"]]
    short = stages_for(Options(), LARGE, 2, 15.0)
    assert stages_for(Options(prove=True), LARGE, 2, 15.0) == short
    assert short != stages_for(Options(), LARGE, 2, 30.0)  # the loops get 60% from 16 s
    assert [s.workers(2) for s in short] == [["lagrange", "lagrange-terms"], ["lns", "lns"]]
    very_short = stages_for(Options(), LARGE, 3, 15.0)  # other worker counts too
    assert stages_for(Options(prove=True), LARGE, 3, 15.0) == very_short
    assert very_short != stages_for(Options(), LARGE, 3, 17.0)


def test_a_built_in_plan_written_out_is_the_same_plan(tmp_path):
    """`maxshard plans default` prints the plan's file; run with --plan it gives
    the same stages, workers and switch as the default run, for every case."""
    for name in ("default", "prove"):
        text = subprocess.run(
            [BIN / "maxshard", "plans", name], capture_output=True, text=True, check=True
        ).stdout
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        mine, builtin = load(path), built_in(name)
        assert describe(mine).splitlines()[1:] == describe(builtin).splitlines()[1:]
        for model in (LARGE, FEW_VARS, SMALL):
            for workers in (1, 2, 3, 8):
                for seconds in (20.0, 300.0):
                    assert stages_for(Options(plan=mine), model, workers, seconds) == stages_for(
                        Options(prove=name == "prove"), model, workers, seconds
                    )


def test_a_run_logs_the_stages_of_its_plan(tmp_path):
    """The default plan's large cases (their conditions lowered to a small
    model), from a file: the run logs its stages, workers and switch as the
    data says; a short budget runs the short case, which ends its first stage
    sooner."""
    inst = generated(tmp_path, 7, nodes=60, forbidden=0.0, functional=0.0, tightness=0.3)
    text = built_in_text("default").replace("variables_min = 1000", "variables_min = 1")
    text = text.replace("points_max = 2000", "points_max = 0")

    def staged(text):
        path = tmp_path / "default.toml"
        path.write_text(text)
        lines: list[str] = []
        options = Options(plan=load(path), workers=2)
        solve(inst, time.monotonic() + 3, Best(inst, lines.append), options)
        stages = [line for line in lines if line.startswith("stage ")]
        ends = [float(line.split(" until ")[1].split("s:")[0]) for line in stages]
        return [line.split(": ", 1)[1] for line in stages], ends[0] / ends[1]

    short, short_end = staged(text)
    text = text.replace("seconds_max = 16", "seconds_max = 0")
    long, long_end = staged(text)
    assert short == long == ["lagrange, lagrange-terms; the switch at 50%", "lns, lns"]
    assert short_end < 0.8 * long_end  # the first stage: 35% against 60% of the time


BAD_PLANS = {
    "unknown backend": (
        '[[stage]]\nshare = 1.0\nbackends = ["lagrange", "nope"]',
        "unknown backend 'nope'",
    ),
    "shares": (
        '[[stage]]\nshare = 0.5\nbackends = ["local"]\n[[stage]]\nshare = 0.4\nbackends = ["lns"]',
        "shares add up to 0.9, not 1",
    ),
    "no backend": ("[[stage]]\nshare = 1.0\nbackends = []", "stage 1: no backend"),
    "share type": ('[[stage]]\nshare = "all"\nbackends = ["local"]', "'share' must be a number"),
    "backends type": ('[[stage]]\nshare = 1.0\nbackends = "local"', "'backends' must be a list"),
    "unknown key": (
        '[[stage]]\nshare = 1.0\nbackends = ["local"]\nworkers = 2',
        "unknown key 'workers'",
    ),
    "no stage": ('name = "empty"', "either [[stage]] tables or [[case]] tables, not neither"),
    "toml": ("[[stage]\nshare = 1", "not valid TOML"),
    "condition": (
        '[[case]]\nwhen = { nodes_max = 5 }\n[[case.stage]]\nshare = 1.0\nbackends = ["local"]\n'
        '[[case]]\n[[case.stage]]\nshare = 1.0\nbackends = ["local"]',
        "unknown condition 'nodes_max'",
    ),
    "fallback": (
        '[[case]]\nwhen = { workers_max = 2 }\n[[case.stage]]\nshare = 1.0\nbackends = ["local"]',
        "the last case must have no 'when'",
    ),
    "switch": (
        '[[stage]]\nshare = 1.0\nbackends = ["local"]\nswitch = 1.5',
        "'switch' must be a share",
    ),
    "pace": (
        'pace = 0\n[[stage]]\nshare = 1.0\nbackends = ["local"]',
        "'pace' must be a positive number",
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_PLANS))
def test_a_bad_plan_file_is_a_one_line_error_before_any_solving(tmp_path, kind):
    text, message = BAD_PLANS[kind]
    path = tmp_path / "plan.toml"
    path.write_text(text)
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load(path)
    if kind in ("unknown backend", "shares", "no backend", "share type", "toml", "fallback"):
        start = time.monotonic()
        out = subprocess.run(
            [BIN / "maxshard", "solve", EXAMPLE, "30", "--plan", str(path)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert out.returncode == 2 and out.stdout == "" and time.monotonic() - start < 15
        assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: {path}")
        assert message in out.stderr


def test_a_missing_plan_file_is_named(tmp_path):
    out = subprocess.run(
        [BIN / "iopddl", EXAMPLE, "5", "--plan", str(tmp_path / "none.toml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and "none.toml: cannot read the plan" in out.stderr
    assert out.stdout == ""


def test_the_minimal_plan_form_runs_from_the_cli_and_iopddl(tmp_path, example):
    path = tmp_path / "plan.toml"
    path.write_text(
        '[[stage]]\nshare = 0.6\nbackends = ["local"]\n[[stage]]\nshare = 0.4\nbackends = ["rc2"]\n'
    )
    for command in (["iopddl", EXAMPLE, "4", "--plan", str(path)],
                    ["maxshard", "solve", EXAMPLE, "4", "--plan", str(path)]):  # fmt: skip
        out = subprocess.run([BIN / command[0], *command[1:]], capture_output=True, text=True)
        assert out.returncode == 0
        assert evaluate(example, json.loads(out.stdout.strip().splitlines()[-1])).cost == 445


def test_plan_text_parses_case_by_case():
    plan = parse(built_in_text("prove"), "prove")
    assert [c.when for c in plan.cases][-1] == {} and len(plan.cases) == 9
    assert Stage(1.0, ("a", "b"), None, ("c",)).workers(1) == ["a", "c"]
    assert Stage(1.0, ("a", "b"), None, ("c",)).workers(4) == ["a", "b", "c"]
    assert Plan.of_backends(["a", "b", "c"], 2).stages(facts_of_any()) == (
        Stage(1.0, ("a", "b"), None, ("c",)),
    )


def test_a_case_holds_within_its_bounds():
    """``_min`` and ``_max`` conditions are inclusive bounds on the facts."""
    from maxshard.orchestrate.plan import Facts

    when = {"seconds_min": 30, "seconds_max": 60, "points_max": 8000}
    assert Facts(8000, 10, 2, 30.0).meet(when) and Facts(100, 10, 2, 60.0).meet(when)
    assert not Facts(100, 10, 2, 29.9).meet(when) and not Facts(100, 10, 2, 60.1).meet(when)
    assert not Facts(8001, 10, 2, 45.0).meet(when)


def facts_of_any():
    from maxshard.orchestrate.plan import Facts

    return Facts(0, 0, 2)


# -- a plugin joins a plan ----------------------------------------------------------

JOINER = '''
"""A backend from outside maxshard that cooperates: it waits for a solution
from another worker (ctx.best()), notes its cost, and answers with the exact
optimum from there."""

import os
import time
from pathlib import Path

from maxshard import backend as b
from maxshard import registry


class Joiner:
    name = "joiner"
    capabilities = b.Capabilities(exact=True, anytime=True, memory=True, lower_bound=False)

    def solve(self, model, deadline, incumbent, report, seed=0):
        ctx = b.context(report)
        start = None if incumbent is None else model.cost(incumbent)
        while time.monotonic() < deadline:
            x = ctx.best()
            if x is not None and model.cost(x) != start:  # a peer's, not the start
                Path(os.environ["JOINER_NOTES"]).write_text(str(model.cost(x)))
                exact = registry.load("toulbar2").solve(model, deadline, x, ctx, seed)
                return b.Result(b.Status.FEASIBLE, exact.solution)
            time.sleep(0.01)
        return b.Result(b.Status.UNKNOWN)
'''


@pytest.fixture
def joiner(tmp_path, monkeypatch):
    """The plugin installed as a third party would be: its module and its
    entry point (a dist-info directory) on the path."""
    site = tmp_path / "site"
    (site / "joiner_plugin").mkdir(parents=True)
    (site / "joiner_plugin" / "__init__.py").write_text(JOINER)
    info = site / "joiner_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: joiner-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\njoiner = joiner_plugin:Joiner\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    notes = tmp_path / "notes.txt"
    monkeypatch.setenv("JOINER_NOTES", str(notes))
    return notes


def unlimited(tmp_path, seed):
    """An instance without a memory limit, where the multiplier loop's answer
    is its first descent (then it stops): not optimal at this seed."""
    problem = generate_problem(
        nodes=80, edges=240, max_strategies=6, forbidden=0.0, functional=0.0, seed=seed
    )
    del problem["problem"]["usage_limit"]
    return write_problem(tmp_path / f"free{seed}.json", problem)


def generate_problem(**kw):
    from maxshard.generate import generate

    return generate(**kw)


def test_a_plugin_in_a_plan_file_gets_the_shared_best_and_gives_the_answer(tmp_path, joiner):
    path = unlimited(tmp_path, 0)
    inst = read_instance(path)
    optimum = maxshard.solve(inst, 20, backends=["toulbar2"], workers=1)  # exact
    assert optimum.status == "optimal"
    plan = tmp_path / "plan.toml"
    plan.write_text('[[stage]]\nshare = 1.0\nbackends = ["lagrange", "joiner"]\n')
    lagrange_alone = maxshard.solve(inst, 10, backends=["lagrange"], workers=1)
    res = maxshard.solve(inst, 30, plan=plan, workers=2)
    received = int(joiner.read_text())
    assert received == lagrange_alone.cost  # the loop's answer reached the plugin
    assert res.method == "joiner" and res.cost < received
    assert res.cost == optimum.cost
    # the same from the command line
    joiner.unlink()
    out = tmp_path / "r.json"
    subprocess.run(
        [BIN / "maxshard", "solve", path, "30", "--plan", plan, "--out", out],
        capture_output=True, check=True,
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["method"] == "joiner" and record["cost"] == res.cost
    assert int(joiner.read_text()) == lagrange_alone.cost
    assert record["plan"] == str(plan) and record["outcome"]["joiner"] == "feasible"


# -- the README ---------------------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readmes_plan_file_is_a_valid_plan(tmp_path):
    """The README's example plan, with a built-in backend for its own, passes
    `maxshard plans --check` (the README points to `maxshard plans` for the
    built-in plans instead of copying them)."""
    import re

    section = README.read_text().split("## Plans")[1]
    assert "`maxshard plans`" in section
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1).replace("mybackend", "local")
    plan = tmp_path / "readme.toml"
    plan.write_text(toml)
    checked = subprocess.run(
        [BIN / "maxshard", "plans", "--check", str(plan)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_the_readme_plugin_cooperates_in_a_plan(tmp_path, monkeypatch):
    """The README's plugin, as written, run beside `local` in a plan: it gets
    the shared best and hands over its state, and its answers are valid."""
    import re

    section = README.read_text().split("## Writing a backend plugin")[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = tmp_path / "readme_polish.py"
    module.write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    real = registry.available()
    polish = EntryPoint("polish", "readme_polish:Polish", GROUP)
    monkeypatch.setattr(registry, "available", lambda: {**real, "polish": polish})
    inst, model, best, x = _started(tmp_path)
    carry: dict = {}
    run_backends(model, best, ["polish", "local"], time.monotonic() + 2.0, workers=2, carry=carry)
    assert "polish" in carry and carry["polish"]["cost"] >= best.evaluation.cost
    assert evaluate(inst, best.solution).feasible


def test_compare_runs_a_plan_file_and_refuses_a_bad_one(tmp_path):
    from maxshard import workbench

    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('[[stage]]\nshare = 1.0\nbackends = ["local"]\n')
    bad.write_text('[[stage]]\nshare = 1.0\nbackends = ["nope"]\n')
    with pytest.raises(PlanError, match="unknown backend 'nope'"):
        workbench.check_backends(["local", f"plan:{bad}"])
    run = workbench.Run("example", EXAMPLE, f"plan:{good}", 0, 5.0)
    record = workbench.run_one(run)
    assert record["cost"] == 445 and record["status"] == "optimal"
    assert evaluate(read_instance(EXAMPLE), record["solution"]).cost == 445


# --- presolve in a child process, the backends prepared meanwhile ----------

PREPARED: list[int] = []  # pids of the processes a Preparer was prepared in


class Preparer(Hang):
    name = "preparer"

    def prepare(self):
        import os

        PREPARED.append(os.getpid())


class BadPreparer(Hang):
    name = "badpreparer"

    def prepare(self):
        raise RuntimeError("cannot prepare")


def same_model(a, b) -> bool:
    fields = vars(a)
    return (
        fields.keys() == vars(b).keys()
        and all(
            np.array_equal(v, vars(b)[k]) if isinstance(v, np.ndarray) else v == vars(b)[k]
            for k, v in fields.items()
            if k != "eliminations"
        )
        and len(a.eliminations) == len(b.eliminations)
    )


def test_presolve_runs_in_a_child_while_the_backends_are_prepared_here(tmp_path, monkeypatch):
    import os

    import maxshard.reduce as reduce_module
    from maxshard.orchestrate import presolve as module
    from maxshard.orchestrate.presolve import presolve

    real = registry.available()
    fakes = {
        "preparer": EntryPoint("preparer", "tests.test_orchestrate:Preparer", GROUP),
        "badpreparer": EntryPoint("badpreparer", "tests.test_orchestrate:BadPreparer", GROUP),
        "missing": EntryPoint("missing", "no_such_module_xyz:Backend", GROUP),
    }
    monkeypatch.setattr(registry, "available", lambda: {**real, **fakes})
    pids = tmp_path / "reduced-in"
    real_reduce = reduce_module.reduce

    def recording(inst, **kw):
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # longer than preparing, as on the large models
        return real_reduce(inst, **kw)

    monkeypatch.setattr(reduce_module, "reduce", recording)
    PREPARED.clear()
    inst = generated(tmp_path, 7, nodes=60, tightness=0.3, forbidden=0.0, functional=0.0)
    model = presolve(inst, True, ["preparer", "badpreparer", "missing", "hang"])
    # a broken plugin or one that cannot load leaves the run standing
    assert [os.getpid()] == PREPARED
    reduced_in = [int(p) for p in pids.read_text().split()]
    assert len(reduced_in) == 1 and reduced_in[0] != os.getpid()
    assert same_model(model, real_reduce(inst))
    x = model.min_usage_solution()
    assert evaluate(inst, model.reconstruct(x)).cost == model.cost(x)
    # preparing stops once presolve has answered: the workers load the rest
    PREPARED.clear()
    module.prepare(["preparer"], until=lambda: True)
    assert PREPARED == []
    answered = iter([False, True])  # presolve answers while "preparer" loads
    module.prepare(["preparer"], until=lambda: next(answered))
    assert PREPARED == []


def test_presolve_falls_back_to_this_process_when_its_child_dies(tmp_path, monkeypatch):
    import os

    from maxshard.orchestrate import presolve as module

    monkeypatch.setattr(module, "_reduce_in_child", lambda *args: os._exit(3))
    inst = generated(tmp_path, 8, nodes=40, tightness=0.3)
    assert same_model(module.presolve(inst, True, []), reduce(inst))
    assert same_model(module.presolve(inst, False, []), reduce(inst, passes=False))


def test_presolve_in_a_child_raises_what_reduce_raises(tmp_path):
    from maxshard.orchestrate.presolve import presolve
    from maxshard.reduce import Infeasible

    inst = generated(tmp_path, 1, nodes=5, tightness=0.0)
    object.__setattr__(inst, "usage_limit", 0)
    needs = [inst.usage[inst.strat_off[i] : inst.strat_off[i + 1]].min() for i in range(inst.n)]
    assert max(u for u, lo, hi in zip(needs, inst.lo, inst.hi, strict=True) if lo < hi) > 0
    with pytest.raises(Infeasible, match="exceeds the limit|fits in memory"):
        presolve(inst, True, [])


def test_an_interrupted_presolve_kills_its_child_at_once(tmp_path, monkeypatch):
    """A signal while the child presolves: the run goes on to its answer at
    once, and the child is killed (not left presolving, nor waited for)."""
    import maxshard.reduce as reduce_module
    from maxshard.orchestrate import presolve as module
    from maxshard.orchestrate import workers

    class Stop(BaseException):
        pass

    def interrupted(names, until):
        raise Stop

    monkeypatch.setattr(reduce_module, "reduce", lambda inst, **kw: time.sleep(60))
    monkeypatch.setattr(module, "prepare", interrupted)
    inst = generated(tmp_path, 9, nodes=20)
    start = time.monotonic()
    with pytest.raises(Stop):
        module.presolve(inst, True, [])
    assert time.monotonic() - start < 0.5
    (child,) = workers._HELPERS
    child.join(timeout=2)
    assert child.exitcode == -signal.SIGKILL
    workers.kill_workers()
    assert not workers._HELPERS


def test_a_loop_s_multipliers_reach_the_later_workers_declared_to_provide_them(
    tmp_path, monkeypatch
):
    """A worker whose backend provides "multipliers" hands over {"lam": ...}:
    the workers started after it (the next stage's) get the last ones as
    ``ctx.multipliers``; a state with "lam" from a backend that does not
    declare them is not passed on, and the first stage's workers get none."""
    inst, model, best, _ = _started(tmp_path)
    if not len(model.base):
        pytest.skip("no memory constraint left after presolve")
    seen = tmp_path / "seen"
    seen.mkdir()

    class Probe:
        def __init__(self, name: str, provides: frozenset[str]) -> None:
            self.name = name
            self.capabilities = Capabilities(False, False, True, False, provides=provides)

        def solve(self, model, deadline, incumbent, report, seed=0):
            ctx = context(report)
            got = ctx.multipliers
            (seen / f"{self.name}-{seed}").write_text("none" if got is None else str(got[0]))
            if self.name.startswith("giver"):  # the value names who handed it over
                ctx.hand_over({"lam": np.full(len(model.base), float(seed + 1))})
            return Result(Status.UNKNOWN)

    real = registry.load
    provided = frozenset({"multipliers"})
    probes = {"giver": provided, "giver2": provided, "other": frozenset(), "taker": frozenset()}
    monkeypatch.setattr(registry, "load", lambda n: Probe(n, probes[n]) if n in probes else real(n))
    carry: dict = {}
    deadline = time.monotonic() + 5
    run_backends(model, best, ["taker"], deadline, seed=0, workers=1, carry=carry)
    run_backends(model, best, ["giver"], deadline, seed=1, workers=1, carry=carry)
    run_backends(model, best, ["taker"], deadline, seed=2, workers=1, carry=carry)
    run_backends(model, best, ["giver2", "other"], deadline, seed=3, workers=1, carry=carry)
    run_backends(model, best, ["taker"], deadline, seed=5, workers=1, carry=carry)
    # "other" hands nothing over; a state of its own with "lam" is not multipliers
    carry["other"] = {"lam": np.full(len(model.base), 99.0)}
    run_backends(model, best, ["taker"], deadline, seed=6, workers=1, carry=carry)
    # the first giver again: its multipliers are now the last handed over
    run_backends(model, best, ["giver"], deadline, seed=7, workers=1, carry=carry)
    run_backends(model, best, ["taker"], deadline, seed=9, workers=1, carry=carry)
    got = {p.name: p.read_text() for p in seen.iterdir() if p.name.startswith("taker")}
    want = {"taker-0": "none", "taker-2": "2.0", "taker-5": "4.0", "taker-6": "4.0"}
    assert got == {**want, "taker-9": "8.0"}
    # the queued worker of a stage gets what the worker before it handed over
    assert (seen / "other-4").read_text() == "4.0"
