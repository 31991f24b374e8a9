"""The protocol between the parent and its workers: it cannot stall, a worker
that falls silent is given up, and a run stopped before its work budget is
spent never says it was deterministic."""

import json
import signal
import subprocess
import sys
import time
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from maxshard import registry, work
from maxshard.backend import GROUP, Capabilities, Result, Status, context
from maxshard.evaluate import evaluate
from maxshard.generate import generate
from maxshard.orchestrate import Options, Run, loop
from maxshard.orchestrate.plan import Plan
from maxshard.reader import read_instance

BIN = Path(sys.executable).parent
#: Variables of the wide instance: a solution pickles to more than a pipe's 64 KiB.
WIDE = 9000


def wide_instance(path: Path, n: int = WIDE) -> Path:
    """``n`` independent nodes of two strategies each (no presolve keeps one
    variable per node), no usage limit: the least-usage start picks strategy 0
    everywhere, every strategy-1 pick saves 1, so a search can improve ``n``
    times, and a solution is ``n`` int64s."""
    problem = {
        "name": "wide",
        "nodes": {
            "intervals": [[0, 1]] * n,
            "costs": [[n + 1, n]] * n,
            "usages": [[1, 2]] * n,
        },
        "edges": {"nodes": [], "costs": []},
    }
    path.write_text(json.dumps({"problem": problem}))
    return path


DET = Capabilities(exact=False, anytime=True, memory=True, lower_bound=False, deterministic=True)


class Improver:
    """Picks strategy 1 on one more variable every 0.02 units: the merged best
    changes at every barrier."""

    name = "improver"
    capabilities = DET

    def solve(self, model, deadline, incumbent, report, seed=0):
        x = model.min_usage_solution() if incumbent is None else np.array(incumbent)
        v = 0
        while work.now() < deadline and v < model.nv:
            if x[v] != 1:
                x[v] = 1
                report(x.copy())
            v += 1
            work.count("python", 0.02 * work.RATES["python"])
        return Result(Status.FEASIBLE, x)


class Quick(Improver):
    """Ends at once: its worker takes the next backend of the queue."""

    name = "quick"

    def solve(self, model, deadline, incumbent, report, seed=0):
        return Result(Status.UNKNOWN)


class Bulky(Improver):
    """Hands over a state far larger than a pipe's buffer as it starts, as
    the Lagrangian loop restarted at the switch hands over its prices."""

    name = "bulky"

    def solve(self, model, deadline, incumbent, report, seed=0):
        context(report).hand_over({"prices": np.ones(1 << 20)})  # 8 MB
        while work.now() < deadline:
            work.count("python", 0.05 * work.RATES["python"])
        return Result(Status.UNKNOWN)


class Mute(Improver):
    """Falls silent before its first barrier: neither reports nor counts work."""

    name = "mute"

    def solve(self, model, deadline, incumbent, report, seed=0):
        time.sleep(3600)


@pytest.fixture
def protocol_backends(monkeypatch):
    real = registry.available()
    fakes = {
        name: EntryPoint(name, f"tests.test_protocol:{cls}", GROUP)
        for name, cls in [("improver", "Improver"), ("quick", "Quick"), ("bulky", "Bulky"),
                          ("mute", "Mute")]
    }  # fmt: skip
    monkeypatch.setattr(registry, "available", lambda: {**real, **fakes})


def _solve(path: Path, plan: list[str], timeout: float, work_units: float, **kw) -> Run:
    options = Options(Plan.of_backends(plan, 2), workers=2, presolve=False, deterministic=True,
                      work=work_units, **kw)  # fmt: skip
    run = Run(options, lambda _line: None)
    run.solve(path, run.start + timeout)
    return run


def test_a_large_state_handed_over_as_the_parent_answers_the_barrier_does_not_stall(
    tmp_path, protocol_backends
):
    """The stall seen on a contest model: a worker started at a barrier hands
    over a large state while the parent answers that barrier with a large
    merged best. Both sends blocked on full pipes until the deadline, and the
    run then said it was deterministic. Here "quick" ends, "bulky" starts on
    its worker at the next barrier, as "improver" has just improved the best."""
    path = wide_instance(tmp_path / "wide.json")
    runs = []
    for _ in range(2):
        start = time.monotonic()
        run = _solve(path, ["improver", "quick", "bulky"], 60, 6.0)
        runs.append((run.result(), time.monotonic() - start))
    (first, took), (second, _) = runs
    assert took < 30, f"the run stalled: {took:.0f} s for 6 units of work"
    assert first.deterministic, first.cut_short
    assert 3.0 <= first.work_reached < 3.1  # each worker spent its 3 units
    assert first.outcome["bulky"] == "unknown"  # it ran to its budget and answered
    assert first.fingerprint == second.fingerprint and first.trace == second.trace
    assert first.cost == evaluate(read_instance(path), first.solution).cost < WIDE * (WIDE + 1)


def test_a_worker_that_falls_silent_is_given_up_and_the_run_says_so(
    tmp_path, protocol_backends, monkeypatch
):
    monkeypatch.setattr(loop, "SILENCE_MIN", 2.0)
    path = wide_instance(tmp_path / "wide.json", 500)
    start = time.monotonic()
    run = _solve(path, ["improver", "mute"], 60, 4.0)
    took = time.monotonic() - start
    result = run.result()
    assert took < 15, took
    assert result.deterministic is False
    assert "worker 2 (mute) fell silent" in result.cut_short
    assert result.outcome["mute"] == "stopped: silent"
    assert result.outcome["improver"] == "feasible"  # the stage went on without it
    assert evaluate(read_instance(path), result.solution).cost == result.cost


class Stop(BaseException):
    """Stands for the deadline's alarm, raised wherever the parent is."""


@pytest.mark.parametrize("where", ["merge", "receive", "wait"])
def test_a_deterministic_run_stopped_anywhere_is_cut_short(tmp_path, protocol_backends,
                                                           monkeypatch, where):  # fmt: skip
    """Stopped in a merge, while receiving a message or while waiting for
    one: the Result says it is not deterministic, and why."""
    calls = {"n": 0}
    if where == "wait":
        target, name = loop, "wait"
    else:
        target, name = loop.StageRun, where
    real = getattr(target, name)

    def stopping(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise Stop("SIGALRM")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, stopping)
    path = wide_instance(tmp_path / "wide.json", 500)
    options = Options(Plan.of_backends(["improver", "improver"], 2), workers=2, presolve=False,
                      deterministic=True, work=4.0)  # fmt: skip
    run = Run(options, lambda _line: None)
    with pytest.raises(Stop):
        run.solve(path, run.start + 60)
    result = run.result()
    assert calls["n"] == 3
    assert result.deterministic is False and result.cut_short == "stopped by SIGALRM"
    assert result.record()["deterministic"] is False


@pytest.mark.parametrize("after", [1.5, 3.0])
def test_a_signal_before_the_work_budget_is_spent_makes_the_cli_say_not_deterministic(
    tmp_path, after
):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(generate(300, tightness=0.6, seed=3)))
    proc = subprocess.Popen(
        [BIN / "maxshard", "solve", path, "60", "--deterministic", "--work", "1000",
         "--out", tmp_path / "r.json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    closing = [line for line in err.splitlines() if line.startswith("# result:")]
    assert closing and "deterministic: no, stopped by SIGTERM" in closing[-1], err
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["deterministic"] is False and record["cut_short"] == "stopped by SIGTERM"
    solution = json.loads(out.strip().splitlines()[-1])
    assert evaluate(read_instance(path), solution).feasible
