"""Presolve in a child process while the backends are prepared in this one."""

import pickle
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from maxshard.evaluate import evaluate
from maxshard.reduce import reduce

from .conftest import generated
from .fakes import PREPARED

BIN = Path(sys.executable).parent


# --- presolve in a child process, the backends prepared meanwhile ----------


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


def test_presolve_runs_in_a_child_while_the_backends_are_prepared_here(
    tmp_path, monkeypatch, fake_plugins
):
    import os

    import maxshard.reduce as reduce_module
    from maxshard.orchestrate import presolve as module
    from maxshard.orchestrate.presolve import presolve

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


def test_a_large_model_comes_back_through_a_file_in_memory(tmp_path, monkeypatch):
    """A model whose arrays hold ``SHARED_BYTES`` or more (here: any) comes
    back through a file in memory: the same model as presolve makes here,
    its eliminations included, its arrays views of that file that this
    process may still write to, and solving it answers the instance."""
    from maxshard.orchestrate import presolve as module

    if module._memory_file() is None:
        pytest.skip("no anonymous memory file on this system (the pipe is used)")
    monkeypatch.setattr(module, "SHARED_BYTES", 0)
    inst = generated(tmp_path, 5, nodes=40, idle=0.7, tightness=0.3, forbidden=0.0)
    model, here = module.presolve(inst, True, []), reduce(inst)
    assert here.eliminations  # the precondition: they come back too
    base = model.unary
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, memoryview | pickle.PickleBuffer)  # read in place, not unpickled
    assert same_model(model, here)
    for a, b in zip(model.eliminations, here.eliminations, strict=True):
        assert np.array_equal(a.choice, b.choice) and np.array_equal(a.maps, b.maps)
    model.unary[0] += 0  # writable: a private copy of the page
    x = model.min_usage_solution()
    assert evaluate(inst, model.reconstruct(x)).cost == model.cost(x)


def test_a_run_freezes_what_is_alive_at_its_start_while_it_runs(tmp_path, monkeypatch):
    """The objects alive when a run starts are out of the collector's reach
    while it runs (its children's collections copy none of their pages), and
    back after it; a caller's own freeze is left as it was."""
    import gc

    import maxshard
    from maxshard.orchestrate import pipeline

    counts = []
    real = pipeline.solve

    def spy(*args, **kw):
        counts.append(gc.get_freeze_count())
        return real(*args, **kw)

    monkeypatch.setattr(pipeline, "solve", spy)
    inst = generated(tmp_path, 3, nodes=20, forbidden=0.0)
    assert gc.get_freeze_count() == 0  # the precondition
    assert maxshard.solve(inst, 2, backends=["local"]).solution is not None
    assert counts[0] > 0 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        maxshard.solve(inst, 2, backends=["local"])
        assert counts[1] > 0 and gc.get_freeze_count() > frozen // 2  # not unfrozen by the run
    finally:
        gc.unfreeze()


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


@pytest.mark.wallclock
def test_an_interrupted_presolve_kills_its_child_at_once(tmp_path, monkeypatch):
    """A signal while the child presolves: the run goes on to its answer at
    once, and the child is killed (not left presolving, nor waited for)."""
    import maxshard.reduce as reduce_module
    from maxshard.orchestrate import presolve as module
    from maxshard.orchestrate.workers import Children

    class Stop(BaseException):
        pass

    def interrupted(names, until):
        raise Stop

    monkeypatch.setattr(reduce_module, "reduce", lambda inst, **kw: time.sleep(60))
    monkeypatch.setattr(module, "prepare", interrupted)
    inst = generated(tmp_path, 9, nodes=20)
    start = time.monotonic()
    children = Children()
    with pytest.raises(Stop):
        module.presolve(inst, True, [], children)
    assert time.monotonic() - start < 0.5
    (child,) = children.helpers
    child.join(timeout=2)
    assert child.exitcode == -signal.SIGKILL
    children.kill()
    assert not children.helpers


@pytest.mark.wallclock
@pytest.mark.parametrize("deterministic", [False, True])
def test_a_presolve_past_the_deadline_leaves_the_run_its_start(
    tmp_path, monkeypatch, deterministic
):
    """A model too large to presolve in the time given (LLaMA-3 8B at 32 layers
    on 2x2x2 took 26 s): the run answers at its deadline with the best start,
    the child killed, and a deterministic run says the clock cut it short."""
    import maxshard
    import maxshard.reduce as reduce_module

    monkeypatch.setattr(reduce_module, "reduce", lambda inst, **kw: time.sleep(60))
    inst = generated(tmp_path, 10, nodes=30, tightness=0.3)
    lines: list[str] = []
    start = time.monotonic()
    result = maxshard.solve(inst, 1.5, deterministic=deterministic, log=lines.append)
    assert time.monotonic() - start < 2.5
    assert "presolve did not end before the deadline" in lines
    assert result.solution is not None
    assert evaluate(inst, np.array(result.solution)).cost == result.cost
    assert result.deterministic is (False if deterministic else None)
    if deterministic:
        assert result.cut_short == "the clock ran out in presolve"


@pytest.mark.wallclock
def test_a_memory_free_run_answers_the_descended_start_when_presolve_is_late(tmp_path, monkeypatch):
    import maxshard
    import maxshard.reduce as reduce_module
    from maxshard.evaluate import all_min_usage
    from maxshard.start import consistent_start, descend

    monkeypatch.setattr(reduce_module, "reduce", lambda inst, **kw: time.sleep(60))
    inst = generated(tmp_path, 11, nodes=40, tightness=0.3, forbidden=0.0)
    object.__setattr__(inst, "usage_limit", None)
    starts = [all_min_usage(inst), consistent_start(inst)]
    start = min(starts, key=lambda x: evaluate(inst, x).cost)
    descended = evaluate(inst, descend(inst, start, lambda: False)).cost
    assert descended < evaluate(inst, start).cost  # the precondition: it has a descent
    lines: list[str] = []
    result = maxshard.solve(inst, 1.5, log=lines.append)
    assert "presolve did not end before the deadline" in lines
    assert result.cost == descended
    assert evaluate(inst, np.array(result.solution)).cost == result.cost
    assert any("by descent before presolve" in line for line in lines)


@pytest.mark.wallclock
def test_a_model_still_coming_through_the_pipe_at_the_deadline_is_not_waited_for(
    tmp_path, monkeypatch
):
    """The model of LLaMA-3 8B at 32 layers on 2x2x2 takes a second to come
    through the pipe: the run does not wait for it past its deadline."""
    import threading

    import maxshard
    from maxshard.orchestrate import presolve as module

    arriving = threading.Event()
    monkeypatch.setattr(module, "_received", lambda *_: (arriving.wait(60), ("died", None))[1])
    inst = generated(tmp_path, 12, nodes=30, tightness=0.3)
    lines: list[str] = []
    start = time.monotonic()
    result = maxshard.solve(inst, 1.5, log=lines.append)
    assert time.monotonic() - start < 3.5
    arriving.set()
    assert "presolve did not end before the deadline" in lines
    assert evaluate(inst, np.array(result.solution)).cost == result.cost
