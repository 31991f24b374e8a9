"""Instances cut from real ones and tiled copies: what they keep of their source."""

import subprocess
import sys

import numpy as np
import pytest

import maxshard
from maxshard.evaluate import all_min_usage, evaluate
from maxshard.generate import cut, min_usage_peak, tile, to_problem
from maxshard.reader import read_instance

from .conftest import BENCHMARKS, EXAMPLE, brute_force, generated, write_problem

G = BENCHMARKS / "asplos-2025-iopddl-G.json.gz"


def connected(inst) -> bool:
    seen, todo = {0}, [0]
    nbrs = [[] for _ in range(inst.n)]
    for u, v in zip(inst.edge_u.tolist(), inst.edge_v.tolist(), strict=True):
        nbrs[u].append(v)
        nbrs[v].append(u)
    while todo:
        for w in nbrs[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return len(seen) == inst.n


@pytest.mark.skipif(not G.exists(), reason="needs the shared benchmarks")
@pytest.mark.parametrize("seed", range(3))
def test_cut_is_a_connected_region_as_tight_as_its_source(seed):
    source = read_instance(G)
    part = cut(source, 120, seed)
    assert part.n == 120 and connected(part)
    ratio = source.usage_limit / min_usage_peak(source)
    assert part.usage_limit == int(ratio * min_usage_peak(part))  # same ratio, rounded down
    # every node and edge is one of the source's, with its strategies and table
    costs = {
        tuple(source.cost[source.strat_off[i] : source.strat_off[i + 1]]) for i in range(source.n)
    }
    assert all(
        tuple(part.cost[part.strat_off[i] : part.strat_off[i + 1]]) in costs for i in range(part.n)
    )
    assert part.m > 0 and len(part.edge_cost) == int(np.diff(part.edge_off).sum())
    assert evaluate(part, all_min_usage(part)).feasible


def test_cut_of_a_generated_instance_round_trips_through_json(tmp_path):
    inst = generated(tmp_path, 3, nodes=40)
    part = cut(inst, 15, seed=2)
    again = read_instance(write_problem(tmp_path / "cut.json", to_problem(part, "cut")))
    for field in ("strat_off", "cost", "usage", "lo", "hi", "edge_u", "edge_v", "edge_cost"):
        assert np.array_equal(getattr(again, field), getattr(part, field))
    assert again.usage_limit == part.usage_limit and again.name == "cut"


@pytest.mark.parametrize("copies", [1, 3])
def test_tiled_optimum_is_copies_times_the_source(tmp_path, copies):
    source = generated(tmp_path, 11, nodes=5, forbidden=0.0, functional=0.0, tightness=0.2)
    best, _ = brute_force(source)
    tiled = tile(source, copies)
    assert tiled.n == copies * source.n and tiled.m == copies * source.m + copies - 1
    path = write_problem(tmp_path / "tiled.json", to_problem(tiled, "tiled"))
    result = maxshard.solve(path, 10, backends=["toulbar2"])
    assert result.status == "optimal" and result.cost == copies * best


def test_generate_command_cuts_and_tiles(tmp_path):
    out = tmp_path / "x.json.gz"
    run = subprocess.run(
        [sys.executable, "-m", "maxshard", "generate", out, "--from", EXAMPLE, "--tile", "2"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    inst = read_instance(out)
    assert inst.n == 10 and inst.name.endswith("-x2")
    # the second copy lives strictly after the first
    assert inst.lo[5:][inst.lo[5:] < inst.hi[5:]].min() >= inst.hi[:5].max()
    bad = subprocess.run(
        [sys.executable, "-m", "maxshard", "generate", out, "--from", EXAMPLE, "--nodes", "9"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "cannot cut 9 nodes" in bad.stderr
    assert bad.stderr.count("\n") == 1
