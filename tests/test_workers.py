"""The orchestrator's workers and their messages: failures, the leader switch,
proofs and bounds, stages, the shared best, old-style plugins, garbage."""

import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from maxshard import registry
from maxshard.backend import BackendError, Capabilities, Result, Status, context, shared_best
from maxshard.evaluate import evaluate
from maxshard.orchestrate import Best, Options, Plan, Stage, run_backends, solve
from maxshard.orchestrate.plan import Case
from maxshard.orchestrate.workers import Shared, WorkerContext
from maxshard.reader import read_instance
from maxshard.reduce import reduce

from .conftest import EXAMPLE, generated, write_problem
from .fakes import started

BIN = Path(sys.executable).parent


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


@pytest.mark.wallclock
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


@pytest.mark.wallclock
@pytest.mark.parametrize("leader_runs", [True, False])
def test_workers_behind_restart_as_the_leader_at_the_switch(tmp_path, fake_plugins, leader_runs):
    lines: list[str] = []
    _, model, best, _ = started(tmp_path, lines.append)
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
    _, model, best, _ = started(tmp_path)
    start = time.monotonic()
    run_backends(model, best, [behind, "stateful"], start + 2.0, workers=2, switch=0.5)
    assert best.method == "stateful"
    # only the copy restarted from the leader's state reports this bound, less its own mark
    assert best.lower_bound == best.evaluation.cost - less


@pytest.mark.wallclock
def test_optimal_backend_stops_the_run_early(tmp_path, fake_plugins):
    _, model, best, x = started(tmp_path)
    start = time.monotonic()
    run_backends(model, best, ["optimal", "hang"], start + 5, workers=1)
    assert time.monotonic() - start < 2 and best.status == "optimal"
    assert best.lower_bound == model.cost(x)


@pytest.mark.wallclock
def test_streamed_bounds_are_kept_and_a_matching_one_ends_the_run(tmp_path, fake_plugins):
    messages = []
    _, model, best, x = started(tmp_path, messages.append)
    start = time.monotonic()
    outcome = run_backends(model, best, ["bounding"], start + 5)
    assert time.monotonic() - start < 2 and best.status == "optimal"
    assert best.lower_bound == model.cost(x) == best.evaluation.cost
    assert any("bound by bounding" in m for m in messages)
    assert outcome == {"bounding": "stopped: proved"}


def test_a_claimed_optimum_that_a_better_answer_refutes_does_not_end_the_run(
    tmp_path, fake_plugins
):
    """``stale`` returns "optimal" for its start after ``finder`` has found a
    cheaper answer: the claim is ignored, and the run is not proved."""
    messages = []
    _, model, best, x = started(tmp_path, messages.append)
    start = time.monotonic()
    outcome = run_backends(model, best, ["finder", "stale"], start + 2.5, workers=2)
    assert best.evaluation.cost < model.cost(x), "precondition: finder improved the start"
    assert outcome["stale"] == "optimal" and best.status == "feasible"
    assert best.lower_bound is None and best.proved_at is None
    assert any("stale claimed the lower bound" in m and "ignored" in m for m in messages)


def test_a_bound_above_a_checked_answer_is_ignored_not_a_proof(tmp_path, fake_plugins):
    messages = []
    _, model, best, x = started(tmp_path, messages.append)
    start = time.monotonic()
    run_backends(model, best, ["overbounding"], start + 1.5)
    assert time.monotonic() - start > 1.2 and best.status == "feasible"
    assert best.lower_bound is None and best.evaluation.cost == model.cost(x)
    assert any("claimed the lower bound" in m and "ignored" in m for m in messages)
    # a bound that an answer found later undercuts is dropped, not kept
    from maxshard.search.local import Search

    best.lower_bound = best.evaluation.cost  # as if a broken backend had "proved" the start
    search = Search(model, 0)
    search.reset(x)
    search.descend(time.monotonic() + 5)
    assert best.offer(model.reconstruct(search.x), "descent", search.x.copy())
    assert best.lower_bound is None and any("dropped" in m for m in messages)


def test_fully_presolved_instance_needs_no_backend(tmp_path):

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


@pytest.mark.wallclock
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


def test_an_old_style_plugin_still_solves_the_example(fake_plugins):
    from maxshard.orchestrate import Run

    plan = Plan.of_backends(["oldstyle"], 1)
    run = Run(Options(plan=plan, workers=1, presolve=False), lambda _m: None)
    run.solve(EXAMPLE, time.monotonic() + 10)
    result = run.result()
    assert result.cost == 445 and result.status == "optimal" and result.method == "oldstyle"
    assert result.outcome == {"oldstyle": "optimal"}


def test_a_worker_reporting_garbage_leaves_the_incumbent_standing(tmp_path, fake_plugins):
    lines: list[str] = []
    inst, model, best, x = started(tmp_path, lines.append)
    start_cost = best.evaluation.cost
    outcome = run_backends(model, best, ["garbage"], time.monotonic() + 1.5, workers=1)
    assert outcome == {"garbage": "stopped at deadline"}
    assert best.method == "start" and best.evaluation.cost == start_cost
    assert best.lower_bound is None
    ignored = [line for line in lines if "ignored" in line]
    assert len(ignored) == 4 and sum("out of the model's domains" in line for line in ignored) == 2


def test_a_loop_s_multipliers_reach_the_later_workers_declared_to_provide_them(
    tmp_path, monkeypatch
):
    """A worker whose backend provides "multipliers" hands over {"lam": ...}:
    the workers started after it (the next stage's) get the last ones as
    ``ctx.multipliers``; a state with "lam" from a backend that does not
    declare them is not passed on, and the first stage's workers get none."""
    inst, model, best, _ = started(tmp_path)
    if not len(model.base):
        pytest.fail("precondition failed: no memory constraint left after presolve")
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
