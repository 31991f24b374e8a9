"""The command-line contract: last line, exit codes, signals, one-line errors."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maxshard.evaluate import evaluate
from maxshard.generate import generate
from maxshard.reader import read_instance

from .conftest import EXAMPLE, write_problem

BIN = Path(sys.executable).parent


def run(*args, timeout=60):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def last_line(text):
    return json.loads(text.strip().splitlines()[-1])


def test_iopddl_example_reaches_the_optimum(example):
    out = run(BIN / "iopddl", EXAMPLE, "3")
    assert out.returncode == 0
    assert evaluate(example, last_line(out.stdout)).cost == 445
    assert all(line.startswith("#") for line in out.stdout.strip().splitlines()[:-1])


@pytest.mark.parametrize(
    ("content", "timeout", "message"),
    [
        (None, "5", "no such file"),
        ('{"problem": {', "5", "malformed JSON"),
        (
            '{"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[1, 2]], "usages": [[1]]}}}',
            "5",
            "node 0 has 2 costs but 1 usages",
        ),
        (
            '{"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[-1]], "usages": [[1]]}}}',
            "5",
            ">= 0",
        ),
        ("EXAMPLE", "0", "timeout must be a positive"),
        ("EXAMPLE", "-3", "timeout must be a positive"),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, content, timeout, message):
    path = tmp_path / "p.json"
    if content == "EXAMPLE":
        path = EXAMPLE
    elif content is not None:
        path.write_text(content)
    out = run(BIN / "iopddl", path, timeout)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and message in out.stderr
    assert "Traceback" not in out.stderr


def test_sigterm_prints_a_valid_answer_at_once(tmp_path):
    path = write_problem(tmp_path / "big.json", generate(600, max_strategies=6, seed=5))
    proc = subprocess.Popen([BIN / "iopddl", path, "60"], stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=10)
    assert time.monotonic() - sent < 2
    ev = evaluate(read_instance(path), last_line(stdout))
    assert ev.feasible


@pytest.mark.wallclock
def test_answer_arrives_before_the_timeout(tmp_path):
    path = write_problem(tmp_path / "big.json", generate(2000, max_strategies=6, seed=2))
    start = time.monotonic()
    out = run(BIN / "iopddl", path, "3")
    assert time.monotonic() - start < 3.0
    assert evaluate(read_instance(path), last_line(out.stdout)).feasible


def test_solve_writes_result_json(tmp_path, example):
    out_file = tmp_path / "r.json"
    out = run(sys.executable, "-m", "maxshard", "solve", EXAMPLE, "3", "--out", out_file, "-q")
    assert out.returncode == 0 and out.stderr == ""
    result = json.loads(out_file.read_text())
    assert result["cost"] == evaluate(example, result["solution"]).cost
    assert result["solution"] == last_line(out.stdout)
    assert result["peak_usage"] <= result["usage_limit"]


def test_solve_without_presolve_searches_the_raw_nodes(example):
    out = run(sys.executable, "-m", "maxshard", "solve", EXAMPLE, "2", "--no-presolve")
    assert out.returncode == 0
    # presolve alone solves the example; without it a backend has five variables
    assert "presolve: 5 variables" in out.stderr
    ev = evaluate(example, last_line(out.stdout))
    assert ev.feasible and ev.forbidden == 0


def test_infeasible_instance_prints_empty_list(tmp_path):
    p = {
        "problem": {
            "nodes": {"intervals": [[0, 2]], "costs": [[1]], "usages": [[9]]},
            "usage_limit": 5,
        }
    }
    out = run(BIN / "iopddl", write_problem(tmp_path / "p.json", p), "2")
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "[]"


def test_evaluate_command(tmp_path):
    ok = run(sys.executable, "-m", "maxshard", "evaluate", EXAMPLE, "[0, 0, 2, 1, 0]")
    assert ok.returncode == 0 and "cost: 445" in ok.stdout
    sol_file = tmp_path / "out.txt"
    sol_file.write_text("# progress\n[0, 1, 1, 1, 0]\n")
    over = run(sys.executable, "-m", "maxshard", "evaluate", EXAMPLE, sol_file)
    assert over.returncode == 1 and "feasible: no" in over.stdout
    bad = run(sys.executable, "-m", "maxshard", "evaluate", EXAMPLE, "[0, 9, 0, 0, 0]")
    assert bad.returncode == 2 and "node 1: strategy 9 out of range" in bad.stderr


def test_info_command():
    out = run(sys.executable, "-m", "maxshard", "info", EXAMPLE, "--reduce")
    assert out.returncode == 0
    # two single-strategy nodes are functions of their neighbours: collapsed on reading
    assert "nodes: 5" in out.stdout and "| read | 3 |" in out.stdout
    assert "| eliminate_degree2 | 2 |" in out.stdout and "| fold_isolated | 0 |" in out.stdout


@pytest.mark.parametrize(
    "args, kw",
    [
        (["0"], {"timeout": 0}),
        (["5", "--gap", "1.5"], {"gap": 1.5}),
        (["5", "--work", "5"], {"work": 5}),
        (["5", "--deterministic", "--work", "-1"], {"deterministic": True, "work": -1}),
        (["5", "-b", "no-such-backend"], {"backends": ["no-such-backend"]}),
    ],
)
def test_a_bad_option_gives_the_same_message_from_the_cli_and_the_api(args, kw):
    """Options are checked in one place (options_for): the CLI prints its one
    line, the API raises it, word for word."""
    import maxshard
    from maxshard.orchestrate.options import UsageError

    out = run(BIN / "maxshard", "solve", EXAMPLE, *args)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: ")
    with pytest.raises(UsageError) as raised:
        maxshard.solve(EXAMPLE, **{"timeout": 5, **kw})
    assert out.stderr.strip() == f"error: {raised.value}"
