"""The plans people write by hand, as assignments of the same instance.

A baseline fixes the placements of the graph's inputs (parameters and the
batch) and lets every operator pick its strategy the way DTensor's own
dispatcher does at run time: the cheapest given its producers' placements
(:func:`propagate`). That is what running the model with these parameter
placements under DTensor costs, priced by the same model as the plan.

* ``data parallel``: parameters replicated, the batch sharded over every
  mesh dimension.
* ``fully sharded``: as data parallel, with each parameter sharded over
  every mesh dimension along its largest divisible dimension (FSDP, ZeRO-3).
* ``megatron``: tensor parallelism on the last mesh dimension (the batch
  sharded over the others): the linear layers that open a block are split by
  output features, the ones that close it (:data:`ROW_PARALLEL`) by input
  features. Only for models with linear layers.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

from .trace import Traced

#: Names of the linear layers that close a block (split by input features);
#: the others open one (split by output features).
ROW_PARALLEL = re.compile(r"(^|\.)(o_proj|out_proj|down_proj|c_proj|fc2|w2|wo|dense_4h_to_h|proj)$")


def baselines(traced: Traced, model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Each baseline's assignment (one strategy per instance node)."""
    mesh = traced.mesh
    batch = _batch(traced)
    plans: dict[str, Callable[[str, torch.Size], tuple]] = {
        "data parallel": lambda name, shape: (Replicate(),) * len(mesh),
        "fully sharded": lambda name, shape: _fully_sharded(shape, mesh),
    }
    linear = _linear_layers(model)
    if linear:
        plans["megatron"] = lambda name, shape: _megatron(name, shape, mesh, linear)
    out = {}
    for label, placement in plans.items():
        tp = label == "megatron"
        wanted = {traced.params[n]: placement(n, traced.nodes[traced.params[n]].meta["val"].shape)
                  for n in traced.params}  # fmt: skip
        for k in traced.inputs:
            wanted[k] = batch(k, tp)
        out[label] = propagate(traced, wanted)
    return out


def propagate(traced: Traced, wanted: dict[int, tuple]) -> np.ndarray:
    """Fix the leaves at the placements ``wanted`` (replicate where a mesh
    dimension's wish is not among their strategies), then give each other
    node, in order, its cheapest strategy given the nodes before it."""
    inst = traced.instance
    sol = np.zeros(inst.n, dtype=np.int64)
    incoming: list[list[int]] = [[] for _ in range(inst.n)]
    for e in range(inst.m):
        incoming[int(inst.edge_v[e])].append(e)
    for k in range(inst.n):
        choices = _fixed(traced, k, wanted[k]) if k in wanted else None
        total = inst.cost[inst.strat_off[k] : inst.strat_off[k + 1]].astype(np.float64)
        for e in incoming[k]:
            total = total + inst.edge_table(e)[sol[inst.edge_u[e]]]
        if choices is not None:
            mask = np.full(len(total), np.inf)
            mask[choices] = 0
            total = total + mask
        sol[k] = int(np.argmin(total))
    return sol


def _fixed(traced: Traced, k: int, wanted: tuple) -> list[int]:
    """The strategies of leaf ``k`` closest to ``wanted``: exactly it if
    offered, else with the dimensions it cannot have replicated."""
    menu = [traced.placements(k, s) for s in range(len(traced.menus[k].strategies))]
    offered = [{pl[i] for pl in menu} for i in range(len(wanted))]
    fallback = tuple(p if p in offered[i] else Replicate() for i, p in enumerate(wanted))
    for attempt in (wanted, fallback):
        hits = [s for s, pl in enumerate(menu) if pl == attempt]
        if hits:
            return hits
    return [s for s, pl in enumerate(menu) if all(isinstance(p, Replicate) for p in pl)] or [0]


def _batch(traced: Traced) -> Callable[[int, bool], tuple]:
    ndim = len(traced.mesh)

    def placement(k: int, tensor_parallel: bool) -> tuple:
        shape = traced.nodes[k].meta["val"].shape
        if not len(shape):
            return (Replicate(),) * ndim
        dims = ndim - 1 if tensor_parallel and ndim > 1 else (0 if tensor_parallel else ndim)
        return (Shard(0),) * dims + (Replicate(),) * (ndim - dims)

    return placement


def _fully_sharded(shape: torch.Size, mesh: tuple[int, ...]) -> tuple:
    devices = int(np.prod(mesh))
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
        if shape[dim] % devices == 0:
            return (Shard(dim),) * len(mesh)
    return (Replicate(),) * len(mesh)


def _linear_layers(model: torch.nn.Module) -> dict[str, tuple[int, int]]:
    """Weight and bias parameter names of each linear layer -> (dimension of
    output features, dimension of input features) of its weight."""
    found: dict[str, tuple[int, int]] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            found[name] = (0, 1)
        elif type(module).__name__ == "Conv1D":  # GPT-2's linear layer, weight stored transposed
            found[name] = (1, 0)
    return found


def _megatron(
    name: str, shape: torch.Size, mesh: tuple[int, ...], linear: dict[str, tuple[int, int]]
) -> tuple:
    layer, _, kind = name.rpartition(".")
    rest = (Replicate(),) * (len(mesh) - 1)
    if layer not in linear:
        return rest + (Replicate(),)
    out_dim, in_dim = linear[layer]
    row = bool(ROW_PARALLEL.search(layer))
    if kind == "bias":
        return rest + (Replicate() if row else Shard(0),)
    return rest + (Shard(in_dim if row else out_dim),)
