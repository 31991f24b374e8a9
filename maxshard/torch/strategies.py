"""Every sharding strategy of every node of a traced step, from DTensor's own
propagation rules on a fake device mesh.

DTensor answers "given these input placements, which output placements can
this operator produce, and at what redistribution cost?" at run time, for one
concrete input placement. Planning needs the whole menu: for each node, every
:class:`OpSpec` (output spec, input specs, one row of redistribution costs per
input, indexed by the producer's strategies). :class:`Enumerator` asks
DTensor's rule tables for it, node by node in the traced order:

* **single-dim rules** (``op_single_dim_strategy_funcs``, most operators in
  torch 2.13): the rule lists placements for one mesh dimension with
  placeholders for "shard this dimension"; we resolve each placeholder to
  ``Shard(d)``, add the all-replicate rule and let DTensor expand the product
  over the mesh (its own expander accepts only one producer placement);
* **strategy functions** (``op_strategy_funcs``): called with the producers'
  full menus, except those that pair producer strategies by position
  (softmax backward, nll loss), which are asked once per placement of the
  driving input and united;
* **operators with no tensor input** (``arange``, ``full``, ...): replicated;
* anything else, or a rule that fails: **replicated**, and listed in
  :attr:`Enumerator.replicated` so that the plan's summary can say so.

Two prunings keep 3-D meshes tractable (measured in docs/torch.md): an input
spec that asks for a ``Partial`` placement its producer never outputs is
dropped (reachable only by a free replicate-to-partial step that helps
nothing), and so are ``_StridedShard`` placements and vocabulary-parallel
``_MaskPartial`` ones (their layout is more than their placements; not
modelled). Asking DTensor is slow, so results are cached by (operator, input
shapes and producer menus, other arguments): repeated layers hit the cache.
The cost rows are priced by :mod:`.network` for the strategies kept only.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._op_schema import (
    OpSchema,
    OpSpec,
    OpStrategy,
    RuntimeSchemaInfo,
    TupleStrategy,
)
from torch.distributed.tensor._ops.single_dim_strategy import (
    _insert_single_dim_replication_strategy,
    _ShardingPlaceholder,
)
from torch.distributed.tensor._ops.utils import (
    expand_to_full_mesh_op_strategy,
    is_tensor_shardable,
)
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard
from torch.utils._pytree import tree_flatten, tree_map_only

from .network import Network, code

aten = torch.ops.aten

#: Strategy functions that pair their producers' strategies by position: asked
#: once per placement of the driving input (see the module docstring).
ALIGNED = {
    aten._softmax_backward_data.default,
    aten._log_softmax_backward_data.default,
    aten.nll_loss_forward.default,
    aten.nll_loss_backward.default,
}
#: Operators with no tensor input whose values depend on the position: kept
#: replicated (the others may start sharded, each device making its piece).
POSITIONAL_FACTORIES = {
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.scalar_tensor.default,
}


def propagator() -> Any:
    return DTensor._op_dispatcher.sharding_propagator


def tensor_meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(t.shape, t.stride(), t.dtype)


def output_meta(value: Any) -> TensorMeta | tuple[TensorMeta | None, ...] | None:
    """The meta of a node's value: one tensor, a tuple of them, or nothing."""
    if isinstance(value, torch.Tensor):
        return tensor_meta(value)
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return tuple(tensor_meta(v) if isinstance(v, torch.Tensor) else None for v in value)
    return None


def output_specs(spec: OpSpec) -> list[DTensorSpec | None]:
    """The output specs of a strategy as a list (one per output)."""
    out = spec.output_specs
    return [out] if isinstance(out, DTensorSpec) else list(out or ())


def tensor_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """A node's tensor arguments in DTensor's order (positional, then keyword)."""
    leaves = tree_flatten((node.args, node.kwargs))[0]
    return [a for a in leaves if isinstance(a, torch.fx.Node) and "val" in a.meta]


#: Placements whose layout is more than the placement (not modelled).
UNSUPPORTED = {_StridedShard.__name__, "_MaskPartial"}


def _unsupported(placements: tuple) -> bool:
    return any(type(p).__name__ in UNSUPPORTED for p in placements)


def _no_costs(*_args: Any, **_kwargs: Any) -> list[float]:
    return []


@contextlib.contextmanager
def _costs_deferred() -> Iterator[None]:
    """While asking DTensor, skip its cost rows: it prices every strategy
    against every producer strategy, most of them pruned afterwards (95% of
    the time on a 2x2x2 mesh); :meth:`Enumerator.row` prices the kept ones."""
    import torch.distributed.tensor._ops as ops

    patched = []
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if (
            name.startswith(ops.__name__)
            and getattr(module, "generate_redistribute_costs", None) is not None
        ):
            patched.append((module, module.generate_redistribute_costs))
            module.generate_redistribute_costs = _no_costs
    try:
        yield
    finally:
        for module, original in patched:
            module.generate_redistribute_costs = original


class Enumerator:
    """The strategies of the nodes of one graph on one mesh.

    ``run(graph)`` returns ``{node: OpStrategy}`` for every node whose value is
    a tensor or a tuple of tensors; each :class:`OpSpec` has its input specs
    (one per :func:`tensor_inputs` entry) and cost rows (microseconds, from
    each producer strategy; ``inf`` where DTensor cannot redistribute)."""

    def __init__(self, mesh: Any, network: Network | None = None) -> None:
        self.mesh = mesh
        self.network = network or Network.default(tuple(mesh.shape))
        self.codes: dict[tuple, list] = {}  # id(menu), output -> its placement codes
        self.prices: dict[tuple, float] = {}
        self.replicated: dict[str, str] = {}  # node name -> why it was replicated
        self.cache: dict[Any, OpStrategy] = {}
        self.rows: dict[tuple, list[float]] = {}
        self.queries = 0
        self.hits = 0

    def run(self, graph: torch.fx.Graph) -> dict[torch.fx.Node, OpStrategy]:
        with _costs_deferred():
            menus: dict[torch.fx.Node, OpStrategy] = {}
            for node in graph.nodes:
                value = node.meta.get("val")
                if output_meta(value) is None:
                    continue
                if node.op == "placeholder":
                    menus[node] = self.leaf(value)
                elif node.op == "call_function":
                    menus[node] = self.node(node, menus)
            return menus

    def row(self, producer: OpStrategy, target: DTensorSpec, element: int = 0) -> list[float]:
        """Microseconds to move output ``element`` of each of ``producer``'s
        strategies to ``target`` (:mod:`.network`)."""
        key = (id(producer), element, code(target.placements))
        if key not in self.rows:
            sources = self.codes.get((id(producer), element))
            if sources is None:
                specs = [output_specs(s)[element] for s in producer.strategies]
                sources = self.codes[(id(producer), element)] = [
                    s and code(s.placements) for s in specs
                ]
            meta = target.tensor_meta
            nbytes = math.prod(meta.shape) * meta.dtype.itemsize
            self.rows[key] = [0.0 if s is None else self.price(s, key[2], nbytes) for s in sources]
        return self.rows[key]

    def price(self, src: tuple, dst: tuple, nbytes: int) -> float:
        key = (src, dst, nbytes)
        if key not in self.prices:
            self.prices[key] = self.network.cost(src, dst, nbytes)
        return self.prices[key]

    def placements(self, ndim: int) -> list[tuple]:
        per_dim = [Replicate()] + [Shard(d) for d in range(ndim)]
        return list(itertools.product(per_dim, repeat=self.mesh.ndim))

    def leaf(self, value: torch.Tensor) -> OpStrategy:
        """A graph input (parameter, buffer, batch): any replicate/shard mix
        whose shards are not empty."""
        meta = tensor_meta(value)
        specs = [DTensorSpec(self.mesh, p, tensor_meta=meta) for p in self.placements(value.ndim)]
        return OpStrategy([OpSpec(s) for s in specs if is_tensor_shardable(meta.shape, s)])

    def node(self, node: torch.fx.Node, menus: dict[torch.fx.Node, OpStrategy]) -> OpStrategy:
        if node.target is operator.getitem:
            return self._getitem(node, menus)
        inputs = tensor_inputs(node)
        args = tree_map_only(torch.fx.Node, lambda a: menus[a], node.args)
        kwargs = tree_map_only(torch.fx.Node, lambda a: menus[a], node.kwargs)
        pytree = any(
            isinstance(a, (list, tuple)) and any(isinstance(x, OpStrategy) for x in a) for a in args
        )
        args = tuple(
            TupleStrategy(list(a)) if isinstance(a, (list, tuple)) and pytree else a for a in args
        )
        meta = output_meta(node.meta["val"])
        key = _key(node.target, args, kwargs)
        self.queries += 1
        if key is not None and key in self.cache:
            self.hits += 1
            return self.cache[key]
        schema = OpSchema(
            node.target, args, kwargs, schema_info=RuntimeSchemaInfo(needs_pytree=pytree)
        )
        producers = [menus[a] for a in inputs]
        strategy, why = self._ask(node, schema, meta, producers)
        kept = self._clean(strategy, producers, meta) if strategy is not None else []
        if not kept:
            why = why or "every strategy DTensor gave was pruned"
            self.replicated[node.name] = why
            kept = [self._replicate(producers, meta)]
        result = OpStrategy(kept)
        if key is not None:
            self.cache[key] = result
        return result

    def _ask(self, node: torch.fx.Node, schema: OpSchema, meta: Any, producers: list[OpStrategy]):
        """DTensor's strategy for ``node``, or (None, why not)."""
        op = node.target
        prop = propagator()
        if not isinstance(op, torch._ops.OpOverload):
            return None, "not an aten operator"
        if not producers:
            placements = None if op in POSITIONAL_FACTORIES else self.placements(len(meta.shape))
            return self._factory(meta, placements), None
        try:
            if op in prop.op_single_dim_strategy_funcs:
                return self._single_dim(op, schema, meta), None
            if op in prop.op_strategy_funcs:
                if op not in ALIGNED:
                    try:
                        return prop.op_strategy_funcs[op](schema), None
                    except Exception:  # noqa: BLE001 - some reject a full menu; ask per placement
                        pass
                return self._aligned(op, schema), None
        except Exception as error:  # noqa: BLE001 - a rule that fails: replicate, and say so
            return None, f"DTensor's rule failed: {type(error).__name__}"
        return None, "DTensor has no strategy for it"

    def _single_dim(self, op: Any, schema: OpSchema, meta: Any) -> OpStrategy:
        info = propagator().op_single_dim_strategy_funcs[op]
        rules = info.func(op, schema.args_meta, schema.kwargs_meta)
        outputs = 1 if isinstance(meta, TensorMeta) else len(meta)
        inputs = len(schema.args_strategy) + len(schema.kwargs_strategy)
        rules = _insert_single_dim_replication_strategy(rules, outputs, inputs, meta)
        rules = [
            [Shard(p.dim) if isinstance(p, _ShardingPlaceholder) else p for p in r] for r in rules
        ]
        return expand_to_full_mesh_op_strategy(
            self.mesh,
            schema,
            rules,
            input_index=outputs,
            output_tensor_meta=meta,
            allow_unbacked_sharding=info.allow_unbacked_sharding,
            allow_uneven_sharding=info.allow_uneven_sharding,
        )

    def _aligned(self, op: Any, schema: OpSchema) -> OpStrategy:
        """Ask once per placement of the highest-rank input, every input given
        that one placement (what DTensor sees at run time); unite the answers."""
        ins = schema.args_strategy
        rank = max(len(a.tensor_meta.shape) for a in ins)
        drivers = dict.fromkeys(
            s.output_spec.placements
            for a in ins
            if len(a.tensor_meta.shape) == rank
            for s in a.strategies
        )
        found: list[OpSpec] = []
        for placements in drivers:

            def one(menu: OpStrategy, placements: tuple = placements) -> OpStrategy:
                ndim = len(menu.tensor_meta.shape)
                fit = tuple(
                    Replicate() if isinstance(p, Shard) and p.dim >= ndim else p for p in placements
                )
                return OpStrategy(
                    [OpSpec(DTensorSpec(self.mesh, fit, tensor_meta=menu.tensor_meta))]
                )

            args = tuple(one(a) if isinstance(a, OpStrategy) else a for a in schema.args_schema)
            try:
                answer = propagator().op_strategy_funcs[op](
                    OpSchema(op, args, schema.kwargs_schema)
                )
            except Exception:  # noqa: BLE001 - this placement has no strategy
                continue
            for spec in answer.strategies:
                spec.redistribute_cost = None  # rows sized to the one-entry menu: recomputed
                found.append(spec)
        return OpStrategy(found)

    def _factory(self, meta: TensorMeta, placements: list[tuple] | None) -> OpStrategy:
        placements = placements or [tuple(Replicate() for _ in range(self.mesh.ndim))]
        specs = [DTensorSpec(self.mesh, p, tensor_meta=meta) for p in placements]
        return OpStrategy([OpSpec(s, [], []) for s in specs if is_tensor_shardable(meta.shape, s)])

    def _replicate(self, producers: list[OpStrategy], meta: Any) -> OpSpec:
        """Everything replicated: each input gathered whole."""
        rep = tuple(Replicate() for _ in range(self.mesh.ndim))
        ins = [DTensorSpec(self.mesh, rep, tensor_meta=p.tensor_meta) for p in producers]
        if isinstance(meta, TensorMeta):
            out: Any = DTensorSpec(self.mesh, rep, tensor_meta=meta)
        else:
            out = tuple(
                None if m is None else DTensorSpec(self.mesh, rep, tensor_meta=m) for m in meta
            )
        return OpSpec(out, ins, [self.row(p, s) for p, s in zip(producers, ins, strict=False)])

    def _clean(self, strategy: Any, producers: list[OpStrategy], meta: Any) -> list[OpSpec]:
        """Normalise DTensor's answer: input specs and tensor metas filled in,
        cost rows against the producers' full menus; unsupported, unshardable,
        useless-partial and duplicate strategies dropped."""
        if not isinstance(strategy, OpStrategy):
            return []
        kept: list[OpSpec] = []
        seen: set = set()
        for spec in strategy.strategies:
            outs = _with_meta(output_specs(spec), meta, self.mesh)
            if not outs or all(o is None for o in outs):
                continue
            ins = spec.input_specs
            if ins is None:  # "inputs as the output" (view-like rules)
                ins = [DTensorSpec(self.mesh, outs[0].placements) for _ in producers]
            if len(ins) != len(producers):
                continue
            ins = [_with(s, p.tensor_meta, self.mesh) for s, p in zip(ins, producers, strict=True)]
            every = [o for o in outs if o is not None] + ins
            if any(_unsupported(s.placements) for s in every):
                continue
            if not all(is_tensor_shardable(s.tensor_meta.shape, s) for s in every):
                continue
            if any(
                any(p.is_partial() for p in s.placements) and s.placements not in _outputs(prod)
                for s, prod in zip(ins, producers, strict=False)
            ):
                continue
            key = (
                tuple(None if o is None else o.placements for o in outs),
                tuple(s.placements for s in ins),
            )
            if key in seen:
                continue
            seen.add(key)
            rows = [self.row(p, s) for p, s in zip(producers, ins, strict=False)]
            out = outs[0] if isinstance(meta, TensorMeta) else tuple(outs)
            kept.append(OpSpec(out, ins, rows))
        return kept

    def _getitem(self, node: torch.fx.Node, menus: dict[torch.fx.Node, OpStrategy]) -> OpStrategy:
        """Element ``i`` of a tuple output: one strategy per placement that
        element takes, moved there from each producer strategy."""
        source, index = node.args
        producer = menus[source]
        chosen: dict[tuple, DTensorSpec] = {}
        for spec in producer.strategies:
            element = output_specs(spec)[index]
            if element is not None:
                chosen.setdefault(element.placements, element)
        specs = []
        for element in chosen.values():
            row = self.row(producer, element, index)
            specs.append(OpSpec(element, [element], [row]))
        return OpStrategy(specs)


def _outputs(menu: OpStrategy) -> set[tuple]:
    return {s.output_spec.placements for s in menu.strategies}


def _with_meta(outs: list[DTensorSpec | None], meta: Any, mesh: Any) -> list[DTensorSpec | None]:
    metas = [meta] if isinstance(meta, TensorMeta) else list(meta)
    if len(outs) != len(metas):
        return []
    return [
        None if o is None or m is None else _with(o, m, mesh)
        for o, m in zip(outs, metas, strict=False)
    ]


def _with(spec: DTensorSpec, meta: TensorMeta, mesh: Any) -> DTensorSpec:
    """``spec`` with ``meta`` (itself when it has it: building specs is slow)."""
    if spec.tensor_meta is not None and spec.tensor_meta.shape == meta.shape:
        return spec
    return DTensorSpec(mesh, spec.placements, tensor_meta=meta)


def _fingerprint(arg: Any) -> Any:
    if isinstance(arg, OpStrategy):
        meta = arg.tensor_meta
        menu = tuple(s.output_spec.placements for s in arg.strategies)
        return ("S", tuple(meta.shape), tuple(meta.stride), meta.dtype, menu)
    if isinstance(arg, TupleStrategy):
        return ("T", *(_fingerprint(c) for c in arg.children))
    if isinstance(arg, (list, tuple)):
        return tuple(_fingerprint(a) for a in arg)
    if isinstance(arg, dict):
        return tuple((k, _fingerprint(v)) for k, v in sorted(arg.items()))
    return arg


def _key(op: Any, args: tuple, kwargs: dict) -> Any:
    """The cache key of a query, or None when an argument is not hashable."""
    key = (op, _fingerprint(args), _fingerprint(kwargs))
    try:
        hash(key)
    except TypeError:
        return None
    return key
