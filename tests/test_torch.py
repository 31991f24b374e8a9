"""The PyTorch front-end: trace -> instance -> plan -> verify, on tiny GPT-2,
LLaMA and MLP models (random weights, nothing downloaded)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import maxshard.torch as mt  # noqa: E402
from maxshard.evaluate import evaluate  # noqa: E402
from maxshard.reader import read_instance  # noqa: E402
from maxshard.torch.trace import fake_mesh  # noqa: E402

from . import torch_models  # noqa: E402

MODELS = Path(torch_models.__file__)
MESHES = [(2,), (2, 2), (2, 2, 2)]


@functools.cache
def traced(name: str, mesh: tuple[int, ...]) -> mt.Traced:
    layers = 1 if len(mesh) == 3 else 2  # a 3-D mesh's menus are long: one layer shows them
    model, args = getattr(torch_models, name)(layers)
    return mt.trace(model, args, mesh=mesh)


def _runtime_output(node: torch.fx.Node, spec, mesh) -> tuple | None:
    """What DTensor's own propagation outputs for ``node`` given the inputs
    at ``spec``'s placements, told to take ``spec`` (None: it has no such
    strategy for these inputs)."""
    import torch.distributed.tensor._sharding_prop as sharding
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._op_schema import OpSchema
    from torch.utils._pytree import tree_map

    from maxshard.torch.verify import _key

    prop = DTensor._op_dispatcher.sharding_propagator
    given = iter(
        DTensorSpec(mesh, s.placements, tensor_meta=s.tensor_meta) for s in spec.input_specs
    )
    args, kwargs = tree_map(
        lambda a: next(given) if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs)
    )
    want = _key(spec)
    original = sharding._select_min_cost_strategy

    def pick(strategy, op_schema=None):
        for candidate in strategy.strategies:
            outs, ins = _key(candidate)
            if outs == want[0] and (candidate.input_specs is None or ins == want[1]):
                return candidate
        raise LookupError

    info = prop.op_to_schema_info.get(
        node.target
    ) or prop.op_to_schema_info_for_single_dim_strategy.get(
        node.target
    )  # as DTensor's dispatcher finds it
    sharding._select_min_cost_strategy = pick
    try:
        out = prop.propagate_op_sharding_non_cached(
            OpSchema(node.target, args, kwargs, schema_info=info)
        )
    except Exception:  # noqa: BLE001 - LookupError, wrapped or not: not offered
        return None
    finally:
        sharding._select_min_cost_strategy = original
    specs = out.output_spec if isinstance(out.output_spec, (tuple, list)) else [out.output_spec]
    return tuple(None if s is None else tuple(s.placements) for s in specs)


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m)))
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_instances_are_valid_and_their_strategies_are_dtensors(name, mesh, tmp_path):
    t = traced(name, mesh)
    path = tmp_path / "i.json"
    t.write(path)
    inst = read_instance(path)  # the reader validates the contest format
    assert inst.n == t.instance.n > 100 and inst.m == t.instance.m
    assert t.instance.n_strategies.max() > 1 and not t.replicated
    assert evaluate(inst, np.zeros(inst.n, dtype=np.int64)).cost >= 0
    # A sample of strategies of every operator: DTensor offers each for its inputs.
    import operator

    from maxshard.torch.strategies import output_specs

    checked: dict[str, int] = {}
    with fake_mesh(mesh) as device_mesh:
        for k, node in enumerate(t.nodes):
            op = str(node.target)
            if (
                node.op != "call_function"
                or node.target is operator.getitem
                or checked.get(op, 0) >= 3
            ):
                continue
            menu = t.menus[k].strategies
            if not menu[0].input_specs:  # factories: made by our own rule
                continue
            spec = menu[(k * 7919) % len(menu)]
            want = tuple(None if s is None else tuple(s.placements) for s in output_specs(spec))
            got = _runtime_output(node, spec, device_mesh)
            assert got is not None and got[: len(want)] == want, (node.name, op, want, got)
            checked[op] = checked.get(op, 0) + 1
    assert len(checked) >= 15


def test_plan_beats_every_baseline_and_reads_back():
    model, args = torch_models.gpt2()
    plan = mt.plan(model, args, mesh=(2, 2), timeout=10)
    assert plan.result.cost < min(c.cost for c in plan.baselines.values())
    assert set(plan.baselines) == {"data parallel", "fully sharded", "megatron"}
    assert evaluate(plan.traced.instance, plan.solution).cost == plan.cost
    assert set(plan.placements) == {n for n, p in model.named_parameters()}
    assert len(plan.ops) == plan.traced.instance.n
    text = plan.summary()
    assert "data parallel" in text and "megatron" in text and "peak memory" in text


def test_the_solve_also_starts_from_the_cheapest_baseline_descended(tmp_path):
    """Without a memory limit the plan hands the solve its cheapest baseline
    after the descent, which no single node's change improves (brute force);
    with a limit, nothing more."""
    from dataclasses import replace

    from maxshard.torch.plan import _descended

    from .conftest import generated

    inst = generated(tmp_path, 2, nodes=12, max_strategies=4, forbidden=0.0)
    assert inst.usage_limit is not None  # the precondition
    free = replace(inst, usage_limit=None)
    rng = np.random.default_rng(0)
    starts = [rng.integers(0, free.n_strategies) for _ in range(3)]
    [y] = _descended(free, starts)
    cost = evaluate(free, y).cost
    assert cost <= min(evaluate(free, x).cost for x in starts)
    for i in range(free.n):
        for s in range(free.n_strategies[i]):
            z = y.copy()
            z[i] = s
            assert evaluate(free, z).cost >= cost
    assert _descended(inst, starts) == []


def test_memory_limit_changes_the_plan_and_an_impossible_one_is_an_error():
    model, args = torch_models.gpt2()
    free = mt.plan(model, args, mesh=(2, 2), timeout=5)
    limit = int(free.peak_memory * 0.6)
    tight = mt.plan(model, args, mesh=(2, 2), timeout=5, memory=limit)
    assert tight.peak_memory <= limit < free.peak_memory
    assert tight.solution != free.solution and tight.cost >= free.result.lower_bound
    with pytest.raises(mt.TorchPlanError, match="smallest peak"):
        mt.plan(model, args, mesh=(2, 2), timeout=5, memory=1000)


def test_deterministic_plans_repeat():
    model, args = torch_models.llama()
    options = dict(mesh=(2, 2), timeout=30, deterministic=True, work=0.5, memory="300KB")
    a = mt.plan(model, args, **options)
    b = mt.plan(model, args, **options)
    assert a.deterministic and b.deterministic
    assert a.solution == b.solution and a.cost == b.cost


def test_verify_gpt2_on_a_2x2_gloo_group():
    model, args = torch_models.gpt2()
    free = mt.plan(model, args, mesh=(2, 2), timeout=5)
    plan = mt.plan(model, args, mesh=(2, 2), timeout=5, memory=int(free.peak_memory * 0.6))
    sharded = [k for k in plan.placements.values() if any(not p.is_replicate() for p in k)]
    assert sharded  # the memory limit forces parameters to be split
    assert mt.verify(plan, model, args) <= 1e-4


def test_verify_mlp_on_four_processes_and_catches_a_false_plan():
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._op_schema import OpSpec
    from torch.distributed.tensor.placement_types import Replicate, Shard

    model, x = torch_models.mlp()
    free = mt.plan(model, x, mesh=(4,), timeout=5)
    plan = mt.plan(model, x, mesh=(4,), timeout=5, memory=int(free.peak_memory * 0.6))
    assert mt.verify(plan, model, x) <= 1e-4
    # Claim the GELU (pointwise: its output is placed as its input) outputs
    # another placement than its input's: DTensor offers no such strategy.
    t = plan.traced
    k = next(
        k
        for k, node in enumerate(t.nodes)
        if "gelu" in str(node.target) and "backward" not in str(node.target)
    )
    spec = t.menus[k].strategies[plan.solution[k]]
    given = spec.input_specs[0].placements[0]
    false = Replicate() if given.is_shard() else Shard(0)
    out = DTensorSpec(spec.output_spec.mesh, (false,), tensor_meta=spec.output_spec.tensor_meta)
    t.menus[k].strategies[plan.solution[k]] = OpSpec(out, spec.input_specs, spec.redistribute_cost)
    with pytest.raises(mt.TorchPlanError, match="no strategy|produced"):
        mt.verify(plan, model, x)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "maxshard", "torch", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "args, says",
    [
        ((f"{MODELS}:untraceable", "--mesh", "2"), "cannot trace the model"),
        ((f"{MODELS}:mlp", "--mesh", "2x0"), "at least 1 device"),
        ((f"{MODELS}:mlp", "--mesh", "4", "--memory", "10B"), "smallest peak"),
        (("no.such.module:factory",), "cannot import no.such.module"),
        ((f"{MODELS}:nothing",), "has no function 'nothing'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says):
    proc = _cli("plan", *args, "--timeout", "2")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_plan_and_export(tmp_path):
    proc = _cli(
        "plan", f"{MODELS}:mlp", "--mesh", "4", "--timeout", "3", "--out", str(tmp_path / "p.json")
    )
    assert proc.returncode == 0, proc.stderr
    assert "maxshard" in proc.stdout and "data parallel" in proc.stdout
    assert (tmp_path / "p.json").stat().st_size > 0
    out = tmp_path / "mlp.json.gz"
    proc = _cli("export", f"{MODELS}:mlp", str(out), "--mesh", "2x2")
    assert proc.returncode == 0, proc.stderr
    solved = subprocess.run(
        [sys.executable, "-m", "maxshard", "solve", str(out), "3"], capture_output=True, text=True
    )
    answer = solved.stdout.strip().splitlines()[-1]
    assert evaluate(read_instance(out), [int(v) for v in answer.strip("[]").split(",")]).clean
