"""Outside solvers declared by config or on the command line run as backends:
under the deadline, killed when it comes, their answers restored and re-costed."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maxshard.backend import BackendError
from maxshard.backends.external import Spec, parse_inline
from maxshard.evaluate import evaluate
from maxshard.generate import generate
from maxshard.reader import read_instance
from maxshard.registry import load

from .conftest import contest_optimum, write_problem

BIN = Path(sys.executable).parent
PY = sys.executable

#: a tiny command-line MIP solver: HiGHS on the LP file, its solution file as the answer
HIGHS_CLI = """
import sys, highspy
h = highspy.Highs(); h.setOptionValue("output_flag", False)
h.setOptionValue("time_limit", float(sys.argv[2]))
h.readModel(sys.argv[1]); h.run(); h.writeSolution(sys.argv[3], 0)
"""


@pytest.fixture
def problem(tmp_path) -> Path:
    """Five variables, five edges and memory left after presolve."""
    return write_problem(
        tmp_path / "p.json",
        generate(nodes=9, forbidden=0.0, tightness=0.1, functional=0.0, seed=16),
    )


@pytest.fixture
def solvers(tmp_path) -> dict:
    """A config file declaring 'mylp' (the script above) and the environment naming it."""
    script = tmp_path / "highs_cli.py"
    script.write_text(HIGHS_CLI)
    config = tmp_path / "solvers.toml"
    command = f"{PY} {script} {{model}} {{timeout}} {{answer}}"
    config.write_text(f'[solvers.mylp]\nformat = "lp"\ncommand = "{command}"\n')
    return {**os.environ, "MAXSHARD_SOLVERS": str(config)}


def run(*args, env=None, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)


def test_a_solver_declared_in_a_config_file_is_a_backend(problem, solvers, tmp_path):
    listed = run(BIN / "maxshard", "backends", env=solvers)
    assert "mylp: exact, memory [external lp:" in listed.stdout
    result = tmp_path / "r.json"
    out = run(BIN / "maxshard", "solve", problem, "30", "-b", "mylp", "--out", result, env=solvers)
    assert out.returncode == 0, out.stderr
    r = json.loads(result.read_text())
    inst = read_instance(problem)
    assert r["status"] == "optimal"  # proved: only mylp could
    assert (r["forbidden_picks"], r["cost"]) == contest_optimum(inst)
    assert evaluate(inst, json.loads(out.stdout.strip().splitlines()[-1])).cost == r["cost"]


def test_compare_runs_declared_solvers_and_records_every_run(problem, solvers, tmp_path):
    sweep = tmp_path / "sweep"
    garbage = f"junk=lp:{PY} -c print('hello') {{model}}"
    out = run(
        BIN / "maxshard", "compare", problem, "-b", "mylp", "-b", "junk", "-b", "local",
        "--timeout", "5", "--out", sweep, "--no-figures", "--solver", garbage, env=solvers,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    records = {r["backend"]: r for r in map(json.loads, (sweep / "results.jsonl").open())}
    assert set(records) == {"mylp", "junk", "local"}
    assert records["mylp"]["status"] == "optimal"
    assert records["junk"]["outcome"].startswith("error: ")  # garbage: that run fails...
    assert "junk's answer" in records["junk"]["outcome"]
    assert records["local"]["cost"] is not None  # ... and the sweep goes on


@pytest.mark.wallclock
def test_a_hanging_solver_is_killed_at_the_deadline_and_the_run_still_answers(problem, tmp_path):
    marker = f"maxshard-test-sleep-{os.getpid()}"
    sleepy = f"sleepy=lp:{PY} -c 'import time; time.sleep(1000)' {marker} {{model}}"
    start = time.monotonic()
    cmd = [BIN / "maxshard", "solve", problem, "4", "-b", "sleepy", "-b", "local"]
    out = run(*cmd, "--solver", sleepy)
    assert out.returncode == 0 and time.monotonic() - start < 10
    solution = json.loads(out.stdout.strip().splitlines()[-1])
    assert evaluate(read_instance(problem), solution).feasible
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the solver outlived its run"


def test_a_bad_declaration_is_a_one_line_error(problem):
    for bad, message in [
        ("nameonly", "NAME=FORMAT:COMMAND"),
        ("x=xml:solve {model}", "unknown format"),
        ("x=lp:solve", "no {model} placeholder"),
        ("x=lp:solve {model} {nope}", "bad command"),
    ]:
        out = run(BIN / "maxshard", "solve", problem, "5", "--solver", bad)
        assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1


def test_parse_inline_and_load():
    spec = parse_inline("a=mps:cbc {model} -sec {timeout} -solve -solu {answer}")
    assert spec == Spec("a", "mps", "cbc {model} -sec {timeout} -solve -solu {answer}")
    with pytest.raises(BackendError):
        load("no-such-solver")
