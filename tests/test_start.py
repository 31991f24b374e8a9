"""The start before presolve: components of matching tables at their least-using
clean root, checked against brute force, on the benchmarks and in a run."""

import itertools

import numpy as np
import pytest

from maxshard import solve
from maxshard.evaluate import all_min_usage, evaluate
from maxshard.instance import FORBIDDEN
from maxshard.reader import read_instance
from maxshard.start import consistent_start, descend

from .conftest import BENCHMARKS, write_problem

F = FORBIDDEN


def matching_chain(seed: int) -> dict:
    """Five nodes of three strategies joined by matching tables along a chain
    and one chord (a cycle); usages tie, so each node's least-using strategy
    often breaks a table; one node has a forbidden strategy."""
    rng = np.random.default_rng(seed)
    n, d = 5, 3
    costs = rng.integers(0, 50, size=(n, d))
    costs[2, rng.integers(d)] = F
    usages = rng.integers(1, 3, size=(n, d))
    perms = {(u, u + 1): rng.permutation(d) for u in range(n - 1)}
    # the chord follows the chain's maps, so the cycle is consistent
    chord = np.arange(d)
    for u in range(n - 1):
        chord = perms[(u, u + 1)][chord]
    perms[(0, n - 1)] = chord
    edges, tables = [], []
    for (u, v), perm in perms.items():
        table = np.full((d, d), F, dtype=np.int64)
        table[np.arange(d), perm] = rng.integers(0, 50, size=d)
        edges.append([u, v])
        tables.append(table.ravel().tolist())
    return {
        "problem": {
            "name": f"chain{seed}",
            "nodes": {
                "intervals": [[0, 2]] * n,
                "costs": costs.tolist(),
                "usages": usages.tolist(),
            },
            "edges": {"nodes": edges, "costs": tables},
            "usage_limit": 1000,
        }
    }


@pytest.mark.parametrize("seed", range(6))
def test_a_component_takes_its_least_using_clean_assignment(tmp_path, seed):
    inst = read_instance(write_problem(tmp_path / "chain.json", matching_chain(seed)))
    x = consistent_start(inst)
    # brute force: of the assignments without a forbidden pick, the one of least
    # summed usage, then of least summed node cost (the component's order)
    keys = []
    for sol in itertools.product(range(3), repeat=inst.n):
        sol = np.array(sol)
        if evaluate(inst, sol).forbidden == 0:
            picked = inst.strat_off[:-1] + sol
            keys.append((int(inst.usage[picked].sum()), int(inst.cost[picked].sum()), sol))
    assert keys, "precondition: the fixed instance has a clean assignment"
    usage, cost, _ = min(keys, key=lambda k: k[:2])
    picked = inst.strat_off[:-1] + x
    assert evaluate(inst, x).forbidden == 0
    assert (int(inst.usage[picked].sum()), int(inst.cost[picked].sum())) == (usage, cost)


def test_the_least_using_picks_break_matchings_somewhere(tmp_path):
    """The instances above test something: the min-usage start breaks a table on some."""
    broken = 0
    for seed in range(6):
        inst = read_instance(write_problem(tmp_path / "chain.json", matching_chain(seed)))
        broken += evaluate(inst, all_min_usage(inst)).forbidden > 0
    assert broken >= 3


@pytest.mark.parametrize("name", ["G", "V"])
def test_the_start_is_clean_and_fits_on_benchmarks(name):
    path = BENCHMARKS / f"asplos-2025-iopddl-{name}.json.gz"
    if not path.exists():
        pytest.skip("needs the shared benchmarks")
    inst = read_instance(path)
    assert evaluate(inst, all_min_usage(inst)).forbidden > 0  # precondition
    ev = evaluate(inst, consistent_start(inst))
    assert ev.clean  # V's also needs a repair pass: one table there is no matching


def test_a_run_offers_it_before_presolve_ends(tmp_path):
    path = write_problem(tmp_path / "chain.json", matching_chain(1))
    inst = read_instance(path)
    assert evaluate(inst, all_min_usage(inst)).forbidden > 0  # precondition
    lines: list[str] = []
    result = solve(path, 5, log=lines.append, workers=1)
    started = [k for k, line in enumerate(lines) if "by consistent start" in line]
    presolved = [k for k, line in enumerate(lines) if line.startswith("presolve:")]
    assert started and presolved and started[0] < presolved[0]
    assert "(" not in lines[started[0]]  # no forbidden picks in it
    assert evaluate(inst, result.solution).clean


def test_repairs_leave_fewer_forbidden_picks_on_random_tables(tmp_path):
    """Generated tables forbid entries at random (few are matchings): the
    components' choices and the repair passes still avoid most of them."""
    from maxshard.generate import generate

    starts, least = 0, 0
    for seed in range(5):
        problem = generate(nodes=200, max_strategies=6, seed=seed, forbidden=0.02, functional=0.4)
        inst = read_instance(write_problem(tmp_path / f"g{seed}.json", problem))
        starts += evaluate(inst, consistent_start(inst)).forbidden
        least += evaluate(inst, all_min_usage(inst)).forbidden
    assert least > 0  # precondition: the least-using picks break tables
    assert starts < least / 2


def memory_free(seed: int, loop: bool) -> dict:
    """Eight nodes of up to four strategies, random tables (some forbidden
    entries), no memory limit; ``loop``: one node also has a table with itself."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, size=8)
    edges = [[int(u), int(v)] for u, v in rng.choice(8, size=(12, 2)) if u != v]
    if loop:
        edges.append([3, 3])
    tables = []
    for u, v in edges:
        t = rng.integers(0, 100, size=int(sizes[u] * sizes[v]))
        t[rng.random(len(t)) < 0.1] = F
        tables.append(t.tolist())
    return {
        "problem": {
            "nodes": {
                "intervals": [[0, 1]] * 8,
                "costs": [rng.integers(0, 100, size=s).tolist() for s in sizes],
                "usages": [[1] * int(s) for s in sizes],
            },
            "edges": {"nodes": edges, "costs": tables},
        }
    }


@pytest.mark.parametrize("seed", range(6))
def test_the_descent_ends_where_no_node_alone_costs_less(tmp_path, seed):
    """Brute force over every single node's strategies: the descent's answer
    costs no more than its start, and no one node's change makes it cheaper."""
    inst = read_instance(write_problem(tmp_path / "p.json", memory_free(seed, loop=seed % 2 == 1)))
    assert inst.usage_limit is None
    x = all_min_usage(inst)
    rounds = []
    y = descend(inst, x, lambda: rounds.append(1) and False)
    cost = evaluate(inst, y).cost
    assert cost <= evaluate(inst, x).cost
    assert len(rounds) >= 1
    for i in range(inst.n):
        for s in range(inst.n_strategies[i]):
            z = y.copy()
            z[i] = s
            assert evaluate(inst, z).cost >= cost


def test_the_descent_stops_when_told(tmp_path):
    inst = read_instance(write_problem(tmp_path / "p.json", memory_free(0, loop=False)))
    x = all_min_usage(inst)
    assert np.array_equal(descend(inst, x, lambda: True), x)


def test_a_given_start_is_offered_and_a_wrong_one_named(tmp_path):
    """``solve(..., starts=...)``: the run begins from the caller's answers
    (here the brute-force optimum, which the least-using start is not), and
    one that is no answer to the instance is a usage error naming it."""
    from maxshard.orchestrate.options import UsageError

    from .conftest import brute_force, generated

    inst = generated(tmp_path, 6, nodes=7, tightness=0.5)
    cost, optimum = brute_force(inst)
    assert cost is not None and evaluate(inst, all_min_usage(inst)).cost > cost
    lines: list[str] = []
    result = solve(inst, 5, backends=["local"], starts=[optimum], log=lines.append)
    found = f"Found solution with cost {cost} by given start 1"
    assert any(line.startswith(found) for line in lines)
    assert result.cost == cost
    with pytest.raises(
        UsageError, match="^start 2: solution has 6 entries but the instance has 7 nodes$"
    ):
        solve(inst, 5, starts=[optimum, optimum[:-1]])
    wrong = list(optimum)
    wrong[4] = int(inst.n_strategies[4])
    out_of_range = f"^start 1: node 4: strategy {wrong[4]} out of range 0..{wrong[4] - 1}$"
    with pytest.raises(UsageError, match=out_of_range):
        solve(inst, 5, starts=[wrong])
    with pytest.raises(
        UsageError, match="^start 1: not a list of integers, one strategy per node$"
    ):
        solve(inst, 5, starts=[[0.5] * 7])
