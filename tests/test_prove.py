"""Proving: stop at a proven gap (CLI and Python), the --prove plan, the summary line."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import maxshard
from maxshard.evaluate import evaluate
from maxshard.generate import generate
from maxshard.orchestrate.plan import Facts
from maxshard.reader import read_instance

from .conftest import EXAMPLE, brute_force, generated, reduced, write_problem

BIN = Path(sys.executable).parent


def instance_file(tmp_path: Path) -> Path:
    """Tight memory, no forbidden picks: local search finds answers but proves
    nothing; only the dual's bound can end the run early."""
    problem = generate(nodes=9, forbidden=0.0, tightness=0.1, functional=0.0, seed=5)
    return write_problem(tmp_path / "p.json", problem)


@pytest.mark.wallclock
def test_gap_stops_early_and_the_bound_is_true(tmp_path):
    path = instance_file(tmp_path)
    optimum, _ = brute_force(read_instance(path))
    res = maxshard.solve(path, timeout=30, backends=["dual", "local"], gap=0.5)
    assert res.gap_reached_at is not None and res.time_s < 15
    assert res.lower_bound is not None and res.lower_bound <= optimum <= res.cost
    assert res.cost - res.lower_bound <= 0.5 * res.cost
    # without the gap the same backends run to the deadline: the stop was the gap's
    res = maxshard.solve(path, timeout=3, backends=["dual", "local"])
    assert res.gap_reached_at is None and res.time_s >= 2.5
    assert res.lower_bound is None or res.lower_bound <= optimum


def test_gap_must_be_a_fraction(tmp_path):
    with pytest.raises(ValueError, match="gap"):
        maxshard.solve(EXAMPLE, timeout=5, gap=1.5)
    out = subprocess.run(
        [BIN / "maxshard", "solve", EXAMPLE, "5", "--gap", "-0.1"], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stderr.startswith("error: gap must be")
    cmd = [BIN / "iopddl", EXAMPLE, "5", "--gap", "x"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 2 and "--gap" in out.stderr and out.stdout == ""


def test_cli_gap_writes_what_was_proven(tmp_path):
    path = instance_file(tmp_path)
    inst = read_instance(path)
    optimum, _ = brute_force(inst)
    result = tmp_path / "r.json"
    cmd = [BIN / "maxshard", "solve", path, "30", "-b", "dual", "-b", "local", "--gap", "0.5"]
    out = subprocess.run([*cmd, "--out", result], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    r = json.loads(result.read_text())
    assert r["target_gap"] == 0.5 and r["gap_reached_at"] is not None and r["time_s"] < 15
    assert r["lower_bound"] <= optimum and evaluate(inst, r["solution"]).cost == r["cost"]
    assert "result: cost" in out.stderr.splitlines()[-1]
    out = subprocess.run(
        [BIN / "iopddl", path, "30", "--gap", "0.5"], capture_output=True, text=True, timeout=60
    )
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and lines[-2].startswith("# result: cost")
    assert evaluate(inst, json.loads(lines[-1])).feasible


def test_prove_proves_the_example(tmp_path):
    result = tmp_path / "r.json"
    out = subprocess.run(
        [BIN / "maxshard", "solve", EXAMPLE, "10", "--prove", "--out", result],
        capture_output=True,
        text=True,
        timeout=60,
    )
    r = json.loads(result.read_text())
    assert out.returncode == 0 and r["status"] == "optimal" and r["plan"] == "prove"
    assert r["cost"] == r["lower_bound"] == 445


def test_workers_beside_the_dual_are_told_it_climbs_the_ascent(tmp_path, monkeypatch):
    """The dual declares that it provides the ascent: every other worker of its
    stage is told (``ctx.peer_provides("ascent")``); without it nobody is."""
    from maxshard import backend as backends
    from maxshard.orchestrate import Best, run_backends

    inst = generated(tmp_path, 2, nodes=30, forbidden=0.0, tightness=0.2)
    model = reduced(inst)
    probes = tmp_path / "probes"
    probes.mkdir()

    class Probe:
        name = "probe"
        capabilities = backends.Capabilities(False, False, True, False)

        def __init__(self, label: str) -> None:
            self.label = label

        def solve(self, model, deadline, incumbent, report, seed=0):
            told = backends.context(report).peer_provides("ascent")
            (probes / f"{self.label}-{seed}").write_text(str(told))
            return backends.Result(backends.Status.UNKNOWN)

    from maxshard import registry

    real = registry.load
    monkeypatch.setattr(registry, "load", lambda n: Probe(n) if n.startswith("p") else real(n))
    deadline = time.monotonic() + 3
    run_backends(model, Best(inst, lambda _m: None), ["dual", "p1", "p2"], deadline, workers=3)
    run_backends(model, Best(inst, lambda _m: None), ["p3"], deadline, seed=5, workers=1)
    told = {p.name: p.read_text() for p in probes.iterdir()}
    assert told == {"p1-1": "True", "p2-2": "True", "p3-5": "False"}


def test_prove_bounds_hold_on_generated_instances(tmp_path):
    """The whole --prove plan (forced onto a small model): its bound is at most
    the brute-force optimum and its answer valid."""
    from maxshard.orchestrate.plan import built_in_text, parse

    forced = parse(built_in_text("prove").replace("points_max = 2000", "points_max = -1"))
    assert forced.stages(Facts(10, 10, 2))[0].backends[0] == "dual"
    for seed in (1, 4):
        problem = generate(nodes=8, forbidden=0.0, tightness=0.1, functional=0.0, seed=seed)
        path = write_problem(tmp_path / f"p{seed}.json", problem)
        optimum, _ = brute_force(read_instance(path))
        res = maxshard.solve(path, timeout=4, plan=forced, workers=2)
        assert res.cost is not None and res.cost >= optimum
        assert res.lower_bound is not None and res.lower_bound <= optimum
