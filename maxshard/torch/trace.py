"""Trace one training step of a model on fake tensors and turn it into a
maxshard instance.

``trace(model, args, mesh=(2, 4))`` runs ``make_fx`` over forward, a scalar
loss and ``autograd.grad`` with every parameter, buffer and input replaced
by a fake tensor on the meta device: nothing is computed and no memory is
taken, so an 8B-parameter model built with ``torch.device("meta")`` traces
as easily as a tiny one (attention then decomposes into matmuls and softmax,
operators DTensor has rules for). A fake process group of the mesh's size
answers DTensor's questions (:mod:`.strategies`); :mod:`.costs` prices them.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..instance import Instance
from .costs import TracedStep, build
from .network import Network
from .strategies import Enumerator, output_specs

#: The largest mesh planned for (devices); a bigger one is a typing mistake.
MAX_DEVICES = 1 << 16


class TorchPlanError(ValueError):
    """Input the PyTorch front-end cannot plan for: the message is one line
    naming the problem (the CLI prints it and exits 2)."""


def parse_mesh(mesh: str | Sequence[int]) -> tuple[int, ...]:
    """``"2x4"``, ``(2, 4)`` or ``8`` as a mesh shape, checked."""
    if isinstance(mesh, int):
        mesh = (mesh,)
    if isinstance(mesh, str):
        try:
            mesh = tuple(int(part) for part in mesh.lower().split("x"))
        except ValueError:
            raise TorchPlanError(
                f"mesh {mesh!r} is not of the form 2x4 (devices per dimension)"
            ) from None
    shape = tuple(mesh)
    if not 1 <= len(shape) <= 4 or any(not isinstance(d, int) or d < 1 for d in shape):
        raise TorchPlanError(f"mesh {shape} must have 1 to 4 dimensions of at least 1 device")
    if math.prod(shape) > MAX_DEVICES:
        raise TorchPlanError(
            f"mesh {shape} has {math.prod(shape)} devices, more than {MAX_DEVICES}"
        )
    return shape


@contextlib.contextmanager
def fake_mesh(shape: tuple[int, ...]) -> Iterator[Any]:
    """A device mesh of ``shape`` over a fake process group (no devices, no
    communication: DTensor only reads the mesh's shape)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise TorchPlanError(
            "a process group is already initialised; plan before init_process_group"
        )
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=math.prod(shape))
    try:
        yield init_device_mesh("cpu", shape)
    finally:
        dist.destroy_process_group()


@dataclass
class Traced:
    """A traced training step and the instance it became.

    ``instance`` node ``k`` is graph node ``nodes[k]``; its strategy ``s`` is
    DTensor's ``OpSpec`` ``menus[k].strategies[s]``. ``params`` maps each
    parameter's name to its node, ``grads`` to its gradient's node.
    ``replicated`` lists the operators DTensor had no strategy for (kept
    replicated) with the reason."""

    instance: Instance
    module: torch.fx.GraphModule
    mesh: tuple[int, ...]
    nodes: list[torch.fx.Node]
    menus: list[Any]
    params: dict[str, int]
    grads: dict[str, int]
    inputs: list[int]
    state: list[str]  # the names of the step's first inputs: parameters, then buffers
    replicated: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # trace, strategies, instance

    def write(self, path: str | Path) -> None:
        """Write the instance as the contest's JSON (gzipped if ``.gz``)."""
        from ..generate import to_problem, write_problem

        write_problem(to_problem(self.instance, self.instance.name), Path(path))

    def stats(self) -> dict[str, int]:
        inst = self.instance
        points = len(inst.events[1])  # the distinct starts and ends of live nodes
        return {"nodes": inst.n, "strategies": int(inst.n_strategies.sum()), "edges": inst.m,
                "edge entries": len(inst.edge_cost), "time points": points}  # fmt: skip

    def placements(self, k: int, s: int) -> tuple:
        """The output placements of node ``k`` under strategy ``s`` (the first
        output's, for an operator returning several)."""
        out = output_specs(self.menus[k].strategies[s])
        first = next(o for o in out if o is not None)
        return tuple(first.placements)


def trace(
    model: torch.nn.Module,
    args: Any,
    mesh: str | Sequence[int] = (2, 4),
    memory: int | str | None = None,
    loss: Callable[[Any], torch.Tensor] | None = None,
    optimizer_states: int = 0,
    network: Network | None = None,
) -> Traced:
    """Trace one training step of ``model`` on ``args`` (a tensor, a tuple of
    them, or a dict of keyword arguments) and build its instance for ``mesh``.

    Parameters
    ----------
    mesh: devices per mesh dimension, ``(2, 4)`` or ``"2x4"``.
    memory: device memory in bytes (or ``"16GB"``), the instance's usage limit.
    loss: turns the model's output into a scalar (default: the sum of the
        output, or of its first tensor).
    optimizer_states: parameter-sized optimizer tensors per parameter kept
        beside it (2 for Adam).
    network: bandwidth and latency of each mesh dimension
        (default: :meth:`Network.default`).

    Raises
    ------
    TorchPlanError: the model cannot be traced or the mesh is not one.
    """
    shape = parse_mesh(mesh)
    limit = parse_bytes(memory)
    started = time.perf_counter()
    module, names = _trace_step(model, args, loss)
    traced_at = time.perf_counter()
    with fake_mesh(shape) as device_mesh:
        enumerator = Enumerator(device_mesh, network)
        menus = enumerator.run(module.graph)
        enumerated_at = time.perf_counter()
        graph = _graph(module, menus, names)
        name = f"{type(model).__name__}-{'x'.join(map(str, shape))}"
        instance = build(graph, name, limit, enumerator.row, optimizer_states)
    done = time.perf_counter()
    return Traced(
        instance=instance,
        module=module,
        mesh=shape,
        nodes=graph.nodes,
        menus=graph.menus,
        params=graph.params,
        grads=graph.grads,
        inputs=[k for k, node in enumerate(graph.nodes) if node.name in names.inputs],
        state=names.param_names + names.buffer_names,
        replicated=enumerator.replicated,
        seconds={
            "trace": traced_at - started,
            "strategies": enumerated_at - traced_at,
            "instance": done - enumerated_at,
        },  # fmt: skip
    )


def parse_bytes(memory: int | str | None) -> int | None:
    """``16GB``, ``512MiB``, ``1e9`` or an int as bytes (GB = 10^9, GiB = 2^30)."""
    if memory is None:
        return None
    if isinstance(memory, int):
        value = memory
    else:
        text = str(memory).strip().lower().replace(" ", "")
        units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
                 "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "b": 1}  # fmt: skip
        scale = next((v for u, v in units.items() if text.endswith(u)), 1)
        number = text[: len(text) - next((len(u) for u in units if text.endswith(u)), 0)]
        try:
            value = int(float(number) * scale)
        except ValueError:
            raise TorchPlanError(f"memory {memory!r} is not a size such as 16GB") from None
    if value <= 0:
        raise TorchPlanError(f"memory must be positive, got {memory!r}")
    return value


@dataclass
class _Names:
    params: list[str]  # placeholder name of each parameter, in order
    param_names: list[str]  # the parameters' own names
    buffer_names: list[str]  # the buffers' (and frozen parameters') names
    inputs: set[str]  # placeholder names of the example inputs


def _trace_step(
    model: torch.nn.Module, args: Any, loss: Callable | None
) -> tuple[torch.fx.GraphModule, _Names]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    if not isinstance(model, torch.nn.Module):
        raise TorchPlanError(f"the model must be a torch.nn.Module, got {type(model).__name__}")
    keys, values = _split_args(args)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not params:
        raise TorchPlanError("the model has no trainable parameters to shard")
    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    buffers = list(model.named_buffers()) + frozen
    names = [n for n, _ in params]
    buffer_names = [n for n, _ in buffers]

    def step(params: list, buffers: list, *inputs: Any) -> Any:
        state = {
            **dict(zip(names, params, strict=False)),
            **dict(zip(buffer_names, buffers, strict=False)),
        }
        if keys is None:
            out = torch.func.functional_call(model, state, tuple(inputs))
        else:
            out = torch.func.functional_call(
                model, state, (), dict(zip(keys, inputs, strict=False))
            )
        value = loss(out) if loss is not None else _first_tensor(out).sum()
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            raise TorchPlanError("the loss must be a scalar tensor")
        return value, torch.autograd.grad(value, params, allow_unused=True)

    fake = FakeTensorMode(allow_non_fake_inputs=True)

    def meta(t: torch.Tensor, grad: bool = False) -> torch.Tensor:
        return fake.from_tensor(t.detach().to("meta").requires_grad_(grad))

    was_training = model.training
    model.eval()  # dropout off: a sharded step must compute what the unsharded one does
    try:
        inputs = (
            [meta(p, True) for _, p in params],
            [meta(b) for _, b in buffers],
            *[meta(v) for v in values],
        )
        module = make_fx(step, tracing_mode="fake")(*inputs)
    except TorchPlanError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure inside the model's code
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise TorchPlanError(
            f"cannot trace the model: {type(error).__name__}: {first[:200]}"
        ) from None
    finally:
        model.train(was_training)
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    first_input = len(params) + len(buffers)
    return module, _Names(
        params=[n.name for n in placeholders[: len(params)]],
        param_names=names,
        buffer_names=buffer_names,
        inputs={n.name for n in placeholders[first_input:]},
    )


def _split_args(args: Any) -> tuple[list[str] | None, list[torch.Tensor]]:
    if isinstance(args, torch.Tensor):
        args = (args,)
    if isinstance(args, dict):
        keys, values = list(args), list(args.values())
    elif isinstance(args, (tuple, list)):
        keys, values = None, list(args)
    else:
        raise TorchPlanError(
            f"the example arguments must be tensors, a tuple or a dict, got {type(args).__name__}"
        )
    if not all(isinstance(v, torch.Tensor) for v in values):
        raise TorchPlanError("every example argument must be a tensor")
    return keys, values


def _first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    items = out.values() if isinstance(out, dict) else out
    for item in items if isinstance(out, (tuple, list, dict)) else (out[0],):
        if isinstance(item, torch.Tensor):
            return item
    raise TorchPlanError("the model's output has no tensor to take a loss of; pass loss=")


def _graph(module: torch.fx.GraphModule, menus: dict, names: _Names) -> TracedStep:
    nodes = [n for n in module.graph.nodes if n in menus]
    index = {node: k for k, node in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    params = {
        p: index[by_name[ph]]
        for p, ph in zip(names.param_names, names.params, strict=False)
        if ph in by_name
    }
    output = next(n for n in module.graph.nodes if n.op == "output")
    loss, *grads = output.args[0]  # make_fx flattens (loss, (grad, ...))
    gradients = {
        p: index[g]
        for p, g in zip(names.param_names, grads, strict=False)
        if isinstance(g, torch.fx.Node) and g in index
    }
    outputs = {index[loss]} | set(gradients.values())
    return TracedStep(
        nodes=nodes,
        menus=[menus[n] for n in nodes],
        params=params,
        grads=gradients,
        outputs=outputs,
    )
