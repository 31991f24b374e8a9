"""A plugin joins a plan, and the README's plan file and plugin work as shown."""

import json
import subprocess
import sys
import time
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import maxshard
from maxshard import registry
from maxshard.backend import GROUP
from maxshard.evaluate import evaluate
from maxshard.orchestrate import run_backends
from maxshard.orchestrate.plan import PlanError
from maxshard.reader import read_instance

from .conftest import EXAMPLE, write_problem
from .fakes import started

BIN = Path(sys.executable).parent


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


class Starter:
    """A peer that answers once, with a descent from the start, and stops."""

    name = "starter"
    capabilities = b.Capabilities(exact=False, anytime=True, memory=True, lower_bound=False)

    def solve(self, model, deadline, incumbent, report, seed=0):
        from maxshard.search.local import Search

        search = Search(model, seed)
        if incumbent is None or not search.reset(incumbent):
            search.reset(model.min_usage_solution())
        search.descend(deadline)
        report(search.x.copy())
        return b.Result(b.Status.FEASIBLE, search.x.copy())
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
    points = "joiner = joiner_plugin:Joiner\nstarter = joiner_plugin:Starter\n"
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{points}")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    notes = tmp_path / "notes.txt"
    monkeypatch.setenv("JOINER_NOTES", str(notes))
    return notes


def unlimited(tmp_path, seed):
    """An instance without a memory limit, where the starter's descent is not
    optimal at this seed."""
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
    plan.write_text('[[stage]]\nshare = 1.0\nbackends = ["starter", "joiner"]\n')
    starter_alone = maxshard.solve(inst, 10, backends=["starter"], workers=1)
    res = maxshard.solve(inst, 30, plan=plan, workers=2)
    received = int(joiner.read_text())
    assert received == starter_alone.cost  # the peer's answer reached the plugin
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
    assert int(joiner.read_text()) == starter_alone.cost
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
    inst, model, best, x = started(tmp_path)
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
    run = workbench.Trial("example", EXAMPLE, f"plan:{good}", 0, 5.0)
    record = workbench.run_one(run)
    assert record["cost"] == 445 and record["status"] == "optimal"
    assert evaluate(read_instance(EXAMPLE), record["solution"]).cost == 445
