"""The comparison workbench: traced sweeps, resuming, Ray, measures, figures, the API."""

import json
import re
import subprocess
import sys

import pytest

import maxshard
from maxshard import workbench
from maxshard.evaluate import evaluate
from maxshard.generate import generate
from maxshard.reader import read_instance

from .conftest import EXAMPLE, ROOT, write_problem


@pytest.fixture
def two_instances(tmp_path):
    return [
        write_problem(
            tmp_path / f"g{seed}.json", generate(30, forbidden=0.0, tightness=0.3, seed=seed)
        )
        for seed in (1, 2)
    ]


def check_records(records, paths):
    """Traces only improve, and every final answer is the evaluator's cost."""
    by_name = {workbench.instance_name(p): read_instance(p) for p in paths}
    for r in records:
        assert r["status"] != "error", r.get("error")
        costs = [c for _, c, _ in r["trace"] if c is not None]
        bounds = [b for _, _, b in r["trace"] if b is not None]
        times = [t for t, _, _ in r["trace"]]
        assert costs == sorted(costs, reverse=True) and bounds == sorted(bounds)
        assert times == sorted(times) and all(t <= r["timeout"] + 1 for t in times)
        if r["cost"] is not None:
            assert costs[-1] == r["cost"]
            assert evaluate(by_name[r["instance"]], r["solution"]).cost == r["cost"]
        if r["bound"] is not None and r["cost"] is not None:
            assert r["bound"] <= r["cost"]


def test_sweep_traces_and_resumes(tmp_path, two_instances):
    out = tmp_path / "sweep"
    records = maxshard.compare(two_instances, ["toulbar2", "local"], 1.5, 1, out, figures=False)
    assert len(records) == 4
    check_records(records, two_instances)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4
    # toulbar2 proves these small models: a proof time, no later than the run
    proved = [r for r in records if r["backend"] == "toulbar2"]
    assert all(r["status"] == "optimal" and 0 <= r["proved_at"] <= 1.6 for r in proved)
    # again, with a second seed: only the new runs are made
    again = maxshard.compare(two_instances, ["toulbar2", "local"], 1.5, 2, out, figures=False)
    assert len(again) == 8
    assert (out / "results.jsonl").read_text().splitlines()[:4] == lines
    assert len((out / "results.jsonl").read_text().splitlines()) == 8


def test_maxshards_own_plans_are_entries_of_a_sweep(tmp_path, two_instances):
    # -b default / -b prove: the whole plan on one presolved instance, checked the same way
    records = maxshard.compare(two_instances, ["default", "prove"], 5, 1, jobs=1, figures=False)
    assert sorted(r["backend"] for r in records) == ["default", "default", "prove", "prove"]
    check_records(records, two_instances)
    assert all(r["status"] == "optimal" and r["proved_at"] <= 5 for r in records)


def test_summary_measures_on_a_known_trace():
    record = {
        "instance": "i",
        "backend": "b",
        "seed": 0,
        "timeout": 10.0,
        "status": "feasible",
        "cost": 100,
        "bound": 80,
        "proved_at": None,
        # no solution for 2 s, then 200 (gap 0.5) until 6 s, then 100 (the best)
        "trace": [[2.0, 200, None], [4.0, 200, 80], [6.0, 100, 80]],
    }
    assert workbench.primal_integral(record, 100) == pytest.approx(2 * 1.0 + 4 * 0.5)
    assert workbench.time_to_final(record) == 6.0
    assert workbench.final_gap(record) == pytest.approx(0.2)
    row = workbench.summary([record])[0]
    assert row["best_cost"] == 100 and row["proved"] == "0/1" and row["final_gap"] == 0.2
    other = dict(record, backend="c", cost=150, trace=[[1.0, 150, None]])
    profile = workbench.performance_profile([record, other], [1.0, 1.5])
    assert profile == {"b": [1.0, 1.0], "c": [0.0, 1.0]}
    proved = dict(record, instance="j", status="optimal", proved_at=6.0)
    lost = dict(other, instance="j", cost=None, trace=[])
    totals = {row["backend"]: row for row in workbench.totals([record, other, proved, lost])}
    assert totals["b"]["answered"] == 2 and totals["b"]["best_found"] == 2
    assert totals["b"]["proved_runs"] == "1/2"
    assert totals["c"]["answered"] == 1 and totals["c"]["best_found"] == 0
    assert totals["c"]["mean_primal_integral_s"] == pytest.approx((1 * 1.0 + 9 / 3 + 10) / 2)


def test_figures_are_drawn(tmp_path, two_instances):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep"
    maxshard.compare(two_instances, ["local"], 1.0, 1, out)
    pngs = sorted((out / "traces").glob("*.png"))
    assert [p.stem for p in pngs] == ["g1", "g2"]
    for png in [*pngs, out / "profile.png"]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_ray_sweep_on_a_local_instance(tmp_path, two_instances):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        records = maxshard.compare(
            two_instances, ["toulbar2"], 1.5, 1, tmp_path / "ray", ray="auto", figures=False
        )
    finally:
        ray.shutdown()
    assert len(records) == 2
    check_records(records, two_instances)


def test_compare_command_prints_the_summary(tmp_path, two_instances):
    out = tmp_path / "cli"
    pattern = str(two_instances[0].parent / "g*.json")
    run = subprocess.run(
        [sys.executable, "-m", "maxshard", "compare", pattern, "-b", "local", "--timeout", "1",
         "--out", str(out), "--no-figures"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "| instance | backend | runs | best_cost |" in run.stdout
    assert "| g1 | local | 1 |" in run.stdout and "| g2 | local | 1 |" in run.stdout
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    bad = subprocess.run(
        [sys.executable, "-m", "maxshard", "compare", str(tmp_path / "none*.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "no file matches" in bad.stderr


def test_readme_python_example_runs(tmp_path, monkeypatch):
    """The README's Python API example, as written (its paths are relative to the
    project root)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.cost == 445 and result.status == "optimal"
    assert evaluate(read_instance(EXAMPLE), result.solution).cost == 445
    assert json.loads(json.dumps(namespace["records"]))  # plain data
