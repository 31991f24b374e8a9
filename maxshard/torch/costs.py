"""The cost and memory model: from the strategies of a traced step to a
maxshard :class:`~maxshard.instance.Instance`.

* **Node cost**: the operator's time on one device under the strategy, a
  roofline ``max(FLOPs / DEVICE_FLOPS, bytes moved / DEVICE_BANDWIDTH)`` on
  the local (per-device) shapes; FLOPs from PyTorch's own formulas
  (``torch.utils.flop_counter``: matmuls, convolutions, attention), bytes
  read and written for the rest. Views, ``getitem`` and graph inputs cost 0.
* **Edge cost**: the time to move the producer's output to the placement
  the consumer's strategy wants (:mod:`.network`, alpha-beta per mesh
  dimension); ``inf`` (no way to get there) is the contest's forbidden 10^18. Each parameter
  also has an edge to its gradient: the cost of bringing the gradient to the
  parameter's placement, where an optimizer needs it.
* **Memory**: the bytes per device of a node's outputs under the strategy,
  live from the node to its last consumer in the traced order (a view adds
  nothing and keeps its base alive); parameters (and ``optimizer_states``
  copies of them, 2 for Adam) over the whole step, gradients from where they
  are made to the end.

Times are integer nanoseconds, memory integer bytes: costs sum exactly.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSpec, OpStrategy
from torch.distributed.tensor.placement_types import Shard
from torch.utils.flop_counter import flop_registry

from ..csr import offsets
from ..instance import FORBIDDEN, Instance
from .strategies import output_specs, tensor_inputs

aten = torch.ops.aten

#: Peak FLOP/s of one device: an A100's dense bf16 rate, the device the
#: planner assumes (docs/torch.md, "Cost model").
DEVICE_FLOPS = 312e12
#: Bytes/s of one device's memory: an A100's HBM.
DEVICE_BANDWIDTH = 2.0e12
#: Nanoseconds per unit of the instance's costs (DTensor's costs are in µs).
NS_PER_US = 1000
#: Operators that return a view of their input: no memory, no time.
VIEWS = {aten._unsafe_view.default, aten.alias.default, aten.detach.default}


def is_view(node: torch.fx.Node) -> bool:
    op = node.target
    return (
        op is operator.getitem
        or op in VIEWS
        or (isinstance(op, torch._ops.OpOverload) and op.is_view)
    )


def local_shape(spec: DTensorSpec) -> list[int]:
    """The shape of one device's piece (the largest piece if uneven)."""
    shape = list(spec.tensor_meta.shape)
    for size, placement in zip(spec.mesh.shape, spec.placements, strict=False):
        if isinstance(placement, Shard):
            shape[placement.dim] = -(-shape[placement.dim] // size)
    return shape


def local_bytes(spec: DTensorSpec | None) -> int:
    if spec is None or spec.tensor_meta is None:
        return 0
    return math.prod(local_shape(spec)) * spec.tensor_meta.dtype.itemsize


def compute_ns(node: torch.fx.Node, spec: OpSpec) -> int:
    """The roofline time of ``node`` under ``spec`` on one device."""
    if node.op != "call_function" or is_view(node):
        return 0
    moved = sum(local_bytes(s) for s in spec.input_specs or ()) + sum(
        local_bytes(s) for s in output_specs(spec)
    )
    flops = 0
    formula = flop_registry.get(getattr(node.target, "overloadpacket", None))
    if formula is not None:
        shapes = iter([torch.Size(local_shape(s)) for s in spec.input_specs])
        args = [next(shapes) if isinstance(a, torch.fx.Node) else a for a in node.args]
        try:
            flops = int(formula(*args, out_val=None))
        except Exception:  # noqa: BLE001 - a formula wanting more than shapes: bytes only
            flops = 0
    seconds = max(flops / DEVICE_FLOPS, moved / DEVICE_BANDWIDTH)
    return round(seconds * 1e9)


def _ns(costs: np.ndarray) -> np.ndarray:
    """Microseconds (float, maybe inf) to integer nanoseconds, inf forbidden."""
    out = np.full(costs.shape, FORBIDDEN, dtype=np.int64)
    finite = np.isfinite(costs)
    out[finite] = np.minimum(np.round(costs[finite] * NS_PER_US), FORBIDDEN).astype(np.int64)
    return out


@dataclass
class TracedStep:
    """What the builder needs from a traced step: its instance nodes in order
    with their strategies, and which are parameters (with their gradients)."""

    nodes: list[torch.fx.Node]
    menus: list[OpStrategy]
    params: dict[str, int]  # parameter name -> node index
    grads: dict[str, int]  # parameter name -> index of its gradient's node
    outputs: set[int]  # nodes the step returns (loss, gradients)


def build(
    graph: TracedStep, name: str, usage_limit: int | None, row: Any, optimizer_states: int = 0
) -> Instance:
    """The maxshard instance of ``graph`` (see the module docstring);
    ``row(menu, spec)`` prices moving each of ``menu``'s outputs to ``spec``."""
    index = {node: k for k, node in enumerate(graph.nodes)}
    strat_off = offsets(np.array([len(m.strategies) for m in graph.menus], dtype=np.int64))
    params = set(graph.params.values())
    cost = np.zeros(strat_off[-1], dtype=np.int64)
    usage = np.zeros(strat_off[-1], dtype=np.int64)
    for k, (node, menu) in enumerate(zip(graph.nodes, graph.menus, strict=True)):
        copies = 1 + optimizer_states if k in params else 1
        holds = not (node.op == "call_function" and is_view(node))  # a view holds nothing
        for s, spec in enumerate(menu.strategies):
            cost[strat_off[k] + s] = compute_ns(node, spec)
            if holds:
                usage[strat_off[k] + s] = copies * sum(local_bytes(o) for o in output_specs(spec))

    lo, hi = _lifetimes(graph, index)
    tables: dict[tuple[int, int], np.ndarray] = {}
    for k, (node, menu) in enumerate(zip(graph.nodes, graph.menus, strict=False)):
        if node.op != "call_function":
            continue
        producers = [index[a] for a in inputs_of(node) if a in index]
        for i, p in enumerate(producers):
            rows = np.array(
                [spec.redistribute_cost[i] for spec in menu.strategies], dtype=np.float64
            )
            _add(tables, p, k, rows.T)
    for param, g in graph.grads.items():
        p = graph.params[param]
        _add(tables, p, g, _gradient_table(graph.menus[p], graph.menus[g], row))
    edges = sorted(tables)
    edge_u = np.array([u for u, _ in edges], dtype=np.int64)
    edge_v = np.array([v for _, v in edges], dtype=np.int64)
    flat = [_ns(tables[e]).reshape(-1) for e in edges]
    edge_off = offsets(np.array([len(f) for f in flat], dtype=np.int64))
    edge_cost = np.concatenate(flat) if flat else np.zeros(0, dtype=np.int64)
    return Instance(
        name=name,
        strat_off=strat_off,
        cost=cost,
        usage=usage,
        lo=lo,
        hi=hi,
        edge_u=edge_u,
        edge_v=edge_v,
        edge_off=edge_off,
        edge_cost=edge_cost,
        usage_limit=usage_limit,
    )


def inputs_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes whose outputs ``node`` reads (a getitem: its tuple)."""
    if node.target is operator.getitem:
        return [node.args[0]]
    return tensor_inputs(node)


def _add(tables: dict[tuple[int, int], np.ndarray], u: int, v: int, table: np.ndarray) -> None:
    """Add ``table`` (rows: u's strategies) to the edge u-v; u before v."""
    if u > v:
        u, v, table = v, u, table.T
    tables[(u, v)] = tables[(u, v)] + table if (u, v) in tables else table


def _gradient_table(param: OpStrategy, grad: OpStrategy, row: Any) -> np.ndarray:
    """Rows: the parameter's strategies; the cost of bringing each gradient
    placement to the parameter's."""
    return np.array([row(grad, p.output_spec) for p in param.strategies], dtype=np.float64)


def _lifetimes(graph: TracedStep, index: dict[torch.fx.Node, int]) -> tuple[np.ndarray, np.ndarray]:
    """``[lo, hi)`` of each node in the traced order: from the node to its last
    consumer (a view's consumers count for its base); to the end for what the
    step returns and for parameters (over the whole step)."""
    n = len(graph.nodes)
    lo = np.arange(n, dtype=np.int64)
    hi = lo + 1
    base = list(range(n))
    for k, node in enumerate(graph.nodes):
        if node.op == "call_function" and is_view(node):
            ins = [index[a] for a in inputs_of(node) if a in index]
            if ins:
                base[k] = base[ins[0]]
    for k, node in enumerate(graph.nodes):
        for a in inputs_of(node) if node.op == "call_function" else ():
            if a in index:
                hi[base[index[a]]] = max(hi[base[index[a]]], k + 1)
    for k in graph.outputs:
        hi[base[k]] = n
    for k in graph.params.values():
        lo[k], hi[k] = 0, n
    return lo, hi
