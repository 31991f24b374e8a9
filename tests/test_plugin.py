"""The separately installed CP-SAT plugin (plugins/maxshard-cpsat), when present."""

import json
import subprocess
import sys
import time

import pytest

from maxshard import registry
from maxshard.backend import Status
from maxshard.backends.local import LocalSearch
from maxshard.evaluate import evaluate
from maxshard.reduce import Infeasible, reduce

from .conftest import EXAMPLE, brute_force, generated

pytestmark = pytest.mark.skipif(
    "cpsat" not in registry.available(), reason="pip install ./plugins/maxshard-cpsat"
)


def test_plugin_is_listed_and_solves_the_example(example, tmp_path):
    listed = subprocess.run(
        [sys.executable, "-m", "maxshard", "backends"], capture_output=True, text=True, check=True
    ).stdout
    assert "cpsat: exact, anytime, memory, lower_bound" in listed and "maxshard-cpsat" in listed
    out = subprocess.run(
        [sys.executable, "-m", "maxshard", "solve", EXAMPLE, "10", "-b", "cpsat", "--no-presolve",
         "--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    assert evaluate(example, json.loads(out.stdout.strip().splitlines()[-1])).cost == 445
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["method"] == "cpsat"  # the plugin itself answered, not presolve


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_matches_brute_force(tmp_path, seed):
    inst = generated(tmp_path, seed, nodes=7, forbidden=0.05, tightness=0.2)
    best, _ = brute_force(inst)
    try:
        model = reduce(inst)
    except Infeasible:  # presolve proved it: brute force must agree
        assert best is None
        return
    result = registry.load("cpsat").solve(model, time.monotonic() + 20, None, lambda x: None)
    if best is None:
        assert (
            result.status is Status.INFEASIBLE
            or evaluate(inst, model.reconstruct(result.solution)).forbidden
        )
    else:
        assert result.status is Status.OPTIMAL
        assert evaluate(inst, model.reconstruct(result.solution)).cost == best


@pytest.mark.wallclock
def test_cpsat_takes_a_hinted_incumbent_as_its_first_answer(tmp_path):
    """The hint sets every variable, the pair indicators too: CP-SAT starts
    from the incumbent instead of from nothing (with the values alone, on this
    model, it found no solution in 3 s)."""
    inst = generated(tmp_path, 0, nodes=400, max_strategies=5, forbidden=0.0, tightness=0.3)
    model = reduce(inst)
    incumbent = LocalSearch().solve(model, time.monotonic() + 0.5, None, lambda x: None).solution
    found = []
    registry.load("cpsat").solve(model, time.monotonic() + 5, incumbent, found.append)
    assert found and model.cost(found[0]) <= model.cost(incumbent)
    assert all(model.fits(x) for x in found)
