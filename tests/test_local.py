import time

import numpy as np
import pytest

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
