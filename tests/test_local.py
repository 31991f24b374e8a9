import time

import numpy as np
import pytest

from maxshard.backend import Status
from maxshard.backends.lns import LNS
from maxshard.backends.local import LocalSearch
from maxshard.evaluate import evaluate
from maxshard.reduce import reduce

from .conftest import brute_force, generated, reduced


@pytest.mark.parametrize("seed", range(12))
def test_local_search_answers_are_valid_and_never_worse_than_start(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=30, max_strategies=4, forbidden=0.05, tightness=0.2)
    model = reduced(inst)
    reports = []
    start = model.min_usage_solution()
    result = LocalSearch().solve(model, time.monotonic() + 0.3, None, reports.append, seed)
    assert reports, "an anytime backend reports at least one solution"
    for x in [*reports, result.solution]:
        ev = evaluate(inst, model.reconstruct(x))
        assert ev.feasible
        assert model.fits(x)
    assert model.cost(result.solution) <= model.cost(start)


@pytest.mark.parametrize("seed", range(6))
def test_local_search_finds_small_optima(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=6, forbidden=0.0, tightness=0.5)
    best, _ = brute_force(inst)
    model = reduce(inst)
    result = LocalSearch().solve(model, time.monotonic() + 0.5, None, lambda x: None, seed)
    assert evaluate(inst, model.reconstruct(result.solution)).cost == best


@pytest.mark.wallclock
def test_respects_deadline(tmp_path):
    inst = generated(tmp_path, 3, nodes=300, max_strategies=5, tightness=0.3)
    model = reduce(inst)
    start = time.monotonic()
    result = LocalSearch().solve(model, start + 0.5, None, lambda x: None, 0)
    assert time.monotonic() - start < 1.0
    assert result.solution is not None and np.all(result.solution < model.dom_size)


@pytest.mark.parametrize("improver", [LocalSearch, LNS])
def test_improvers_answer_an_emptied_model_and_start_from_what_fits(tmp_path, example, improver):
    """The :class:`~maxshard.backend.Improver` base: an emptied model gets its
    answer, an incumbent that does not fit gives way to the minimum-usage
    solution, and where nothing fits the answer is UNKNOWN."""
    model = reduce(example)
    assert model.nv == 0  # the precondition: presolve empties the contest's example
    result = improver().solve(model, time.monotonic() + 5, None, lambda x: None, 0)
    assert result.status is Status.OPTIMAL and len(result.solution) == 0
    cost = evaluate(example, model.reconstruct(result.solution)).cost
    assert result.lower_bound == cost == brute_force(example)[0]

    inst = generated(tmp_path, 1, nodes=30, max_strategies=4, forbidden=0.0, tightness=0.3)
    model = reduced(inst)
    low = model.min_usage_solution()
    # each variable at its value of most usage over all its terms
    most = np.zeros(model.dom_off[-1], dtype=np.int64)
    for k, v in enumerate(model.term_var):
        most[model.dom_off[v] : model.dom_off[v + 1]] += model.usage_of(k)
    high = np.array([np.argmax(most[model.dom_off[v] : model.dom_off[v + 1]])
                     for v in range(model.nv)])  # fmt: skip
    model.limit = int(model.load(low).max())
    assert len(model.base) and not model.fits(high)  # the precondition: a start that does not fit
    reports = []
    result = improver().solve(model, time.monotonic() + 0.3, high, reports.append, 0)
    assert result.status is Status.FEASIBLE and reports
    assert all(model.fits(x) for x in [*reports, result.solution])

    model.limit -= 1
    result = improver().solve(model, time.monotonic() + 0.3, None, reports.append, 0)
    assert result.status is Status.UNKNOWN and result.solution is None
