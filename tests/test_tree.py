import itertools

import numpy as np
import pytest

from maxshard.reduce import reduce
from maxshard.search import kernels
from maxshard.search.tree import Trees

from .conftest import generated


def priced_cost(model, pen, x):
    return model.cost(x) + int(pen[model.dom_off[:-1] + x].sum())


@pytest.mark.parametrize("seed", range(6))
def test_tree_move_is_exact_on_an_induced_tree(tmp_path, seed):
    """The freed variables form an induced tree (connected, one edge fewer than
    variables among them), and its answer is the best assignment of them with
    the rest fixed, by brute force, priced costs included; its cost and the
    current one differ as the whole model's priced costs do."""
    inst = generated(tmp_path, seed, nodes=24, max_strategies=3, forbidden=0.0)
    model = reduce(inst, passes=False)  # one variable per node: the graph keeps its cycles
    rng = np.random.default_rng(seed)
    kernels.seed(seed)
    trees = Trees(kernels.graph(model, 0))
    sizes = set()
    for _ in range(8):
        x = rng.integers(0, model.dom_size)
        pen = rng.integers(0, 50, int(model.dom_off[-1]))
        root = int(rng.integers(model.nv))
        free, y, new, current = trees.best(x, pen.astype(np.float64), root, 7)
        sizes.add(len(free))
        assert 1 <= len(free) <= 7 and len(set(free.tolist())) == len(free)
        inside = np.isin(model.edge_u, free) & np.isin(model.edge_v, free)
        assert inside.sum() == len(free) - 1  # a tree, if connected:
        reached, frontier = {int(free[0])}, [int(free[0])]
        while frontier:
            v = frontier.pop()
            for e in np.flatnonzero(inside & ((model.edge_u == v) | (model.edge_v == v))):
                w = int(model.edge_u[e] + model.edge_v[e] - v)
                if w not in reached:
                    reached.add(w)
                    frontier.append(w)
        assert reached == set(free.tolist())
        base = priced_cost(model, pen, x)
        best = None
        for values in itertools.product(*(range(d) for d in model.dom_size[free])):
            trial = x.copy()
            trial[free] = values
            change = priced_cost(model, pen, trial) - base
            best = change if best is None else min(best, change)
        trial = x.copy()
        trial[free] = y
        assert new - current == best == priced_cost(model, pen, trial) - base
    assert max(sizes) > 2  # trees grew beyond a single edge
