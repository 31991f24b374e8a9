"""The bulk collapse of functional edges (maxshard.reduce.collapse)."""

import numpy as np
import pytest

from maxshard.instance import FORBIDDEN
from maxshard.model import saturating_sum
from maxshard.reader import read_instance
from maxshard.reduce import forbidden_free_values
from maxshard.reduce.collapse import collapse

from .conftest import write_problem

F = FORBIDDEN


def chain(tmp_path, n=6, d=3):
    """Node i+1 follows node i (strategy k allows only k): one tree of n nodes."""
    table = [0 if a == b else F for a in range(d) for b in range(d)]
    p = {
        "problem": {
            "nodes": {
                "intervals": [[i, i + 2] for i in range(n)],
                "costs": [[10 * i + k for k in range(d)] for i in range(n)],
                "usages": [[k + 1 for k in range(d)] for _ in range(n)],
            },
            "edges": {"nodes": [[i, i + 1] for i in range(n - 1)], "costs": [table] * (n - 1)},
        }
    }
    return read_instance(write_problem(tmp_path / "chain.json", p))


def test_a_functional_chain_collapses_onto_one_root(tmp_path):
    inst = chain(tmp_path)
    forest = collapse(inst, forbidden_free_values(inst))
    assert len(set(forest.root.tolist())) == 1 and not len(forest.cross)
    r = int(forest.root[0])
    # each value of the root fixes every node to the same strategy
    for i in range(inst.n):
        assert forest.map_of(i).tolist() == [0, 1, 2]
    # the tree's costs per root value: every node's cost at that strategy
    assert forest.unary_of(r).tolist() == [sum(10 * i + k for i in range(6)) for k in range(3)]


def test_dead_strategies_and_cross_tables(tmp_path):
    # node 1 follows node 0; node 2 is free; strategy 2 of node 0 is forbidden
    p = {
        "problem": {
            "nodes": {
                "intervals": [[0, 1]] * 3,
                "costs": [[1, 2, F], [0, 0, 0], [5, 7]],
                "usages": [[0, 0, 0], [0, 0, 0], [0, 0]],
            },
            "edges": {
                "nodes": [[0, 1], [1, 2]],
                "costs": [[F, 3, F, 4, F, F, F, F, 9], [1, 2, 3, 4, 5, 6]],
            },
        }
    }
    inst = read_instance(write_problem(tmp_path / "p.json", p))
    forest = collapse(inst, forbidden_free_values(inst))
    assert forest.root.tolist() == [0, 0, 2] and forest.cross.tolist() == [1]
    assert forest.map_of(0).tolist() == [0, 1]  # strategy 2 is dead
    assert forest.map_of(1).tolist() == [1, 0]  # 0 -> 1, 1 -> 0
    assert forest.unary_of(0).tolist() == [1 + 0 + 3, 2 + 0 + 4]


def test_saturating_sum_is_exact_below_the_sentinel_and_saturates_above():
    index = np.array([0, 0, 1, 1, 1, 2])
    values = np.array([5, 7, 2**62, 2**62, 2**62, F - 1])
    out = saturating_sum(index, values, 3)
    assert out.tolist() == [12, F, F - 1]


@pytest.mark.parametrize("seed", range(4))
def test_functional_edges_found_compiled_or_not_are_the_same(tmp_path, monkeypatch, seed):
    """The compiled partner count (``compiled.partners``) against numpy's, on
    tables with forbidden entries, functional ones among them, and dead
    strategies."""
    import maxshard.reduce.collapse as module

    from .conftest import generated

    inst = generated(tmp_path, seed, nodes=60, max_strategies=5, forbidden=0.2, functional=0.5)
    alive = np.random.default_rng(seed).random(len(inst.cost)) >= 0.1
    found = []
    for entries in (10**18, 0):  # numpy, then compiled
        monkeypatch.setattr(module, "COMPILED_ENTRIES", entries)
        found.append(module._functions(inst, alive))
    assert len(found[0].edge) > 0  # the precondition: functional edges exist
    for numpy_part, compiled_part in zip(*found, strict=True):
        assert np.array_equal(numpy_part, compiled_part)
