"""Plans as data: the built-in plans' cases, plan files, their errors."""

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from maxshard.evaluate import evaluate
from maxshard.orchestrate import Best, Options, Plan, Stage, built_in, solve
from maxshard.orchestrate.pipeline import stages_for
from maxshard.orchestrate.plan import Facts, PlanError, built_in_text, describe, load, parse

from .conftest import EXAMPLE, generated

BIN = Path(sys.executable).parent


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


def test_small_memory_free_models_run_at_a_slower_pace_than_small_memory_ones():
    """Up to 40 s, a small model with no kept point runs the same stages as one
    whose memory binds, at its own pace (its toulbar2 nodes cost more than
    their price): its deterministic budget is smaller."""
    default = built_in("default")
    free, tight = Facts.of(facts(0, 300), 2, 10.0), Facts.of(facts(400, 300), 2, 10.0)
    assert default.stages(free) == default.stages(tight)
    assert default.case(free).pace < default.case(tight).pace
    assert default.case(Facts.of(facts(0, 300), 2, 41.0)) == default.case(
        Facts.of(facts(400, 300), 2, 41.0)
    )


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


@pytest.mark.wallclock
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
