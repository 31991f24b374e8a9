"""Run a plan for real: the traced step on DTensors, one process per device.

:func:`verify` forks one process per mesh device, joins them in a gloo group
on this machine and executes the traced step node by node. Each node's
inputs are redistributed to the placements the plan's strategy wants, and
the operator runs on DTensors with DTensor's strategy choice replaced by the
plan's (so the plan, not DTensor's own preference, is what runs; a strategy
DTensor does not offer for those inputs is an error). Each output's
placements are checked against the plan's, and the loss and every gradient
against the same step run unsharded.

Processes are forked (the traced graph cannot be pickled to a fresh one),
so :func:`verify` works where ``fork`` does: Linux and macOS.
"""

from __future__ import annotations

import datetime
import math
import operator
import os
import pickle
import socket
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .strategies import output_specs
from .trace import TorchPlanError, _split_args

#: The most processes verify starts (one per device).
MAX_PROCESSES = 16
#: Largest difference accepted, relative to the reference's largest magnitude
#: (float32 sums in another order differ by about 1e-7 of it).
TOLERANCE = 1e-4


class PlanMismatch(TorchPlanError):
    """The plan did not run as planned, or computed something else."""


def verify(plan: Any, model: torch.nn.Module, args: Any, timeout: float = 300.0) -> float:
    """Execute ``plan`` (a :class:`~maxshard.torch.ShardingPlan`) on ``model``
    (real weights) and ``args`` on a gloo group of one process per device.

    Returns
    -------
    The largest difference of the loss and the gradients from the unsharded
    step, relative to each one's largest magnitude.

    Raises
    ------
    PlanMismatch: an operator's output placement is not the plan's, DTensor
        has no such strategy, or a difference exceeds :data:`TOLERANCE`.
    TorchPlanError: the model has no real weights, or the mesh needs more
        than :data:`MAX_PROCESSES` processes.
    """
    traced = plan.traced
    devices = math.prod(traced.mesh)
    if devices > MAX_PROCESSES:
        raise TorchPlanError(
            f"verify runs a process per device: {devices} devices is more than {MAX_PROCESSES}"
        )
    leaves = _leaves(traced, model, args)
    reference = _execute(traced, leaves, None, None)
    with tempfile.TemporaryDirectory(prefix="maxshard-verify-") as out:
        _launch(devices, (traced, np.asarray(plan.solution), leaves, reference, out), timeout)
        return max(pickle.loads(Path(out, f"{r}.ok").read_bytes()) for r in range(devices))


def _leaves(traced: Any, model: torch.nn.Module, args: Any) -> list[torch.Tensor]:
    state = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers())}
    missing = [n for n in traced.state if n not in state]
    if missing:
        raise TorchPlanError(f"the model has no {missing[0]!r}: not the model that was traced")
    tensors = [state[n].detach() for n in traced.state] + _split_args(args)[1]
    if any(t.is_meta for t in tensors):
        raise TorchPlanError(
            "verify needs real weights and inputs: the model or an input is on the meta device"
        )
    return [t.to("cpu") for t in tensors]


def _launch(devices: int, payload: tuple, timeout: float) -> None:
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.start_processes(
        _rank,
        args=(devices, port, timeout, payload),
        nprocs=devices,
        join=False,
        start_method="fork",
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise PlanMismatch(
                    f"the plan did not finish in {timeout:.0f} s on {devices} processes"
                )
    except ProcessException:
        errors = sorted(Path(payload[-1]).glob("*.error"))
        first = min((pickle.loads(p.read_bytes()) for p in errors), default=(0, "a process died"))
        raise PlanMismatch(first[1]) from None
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()


def _rank(rank: int, devices: int, port: int, timeout: float, payload: tuple) -> None:
    import logging

    from torch.distributed.device_mesh import init_device_mesh

    traced, solution, leaves, reference, out = payload
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    logging.getLogger("torch").setLevel(logging.ERROR)  # per-rank warnings (gloo lacks all-to-all)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=devices, timeout=datetime.timedelta(seconds=timeout)
    )
    try:
        mesh = init_device_mesh("cpu", traced.mesh)
        got = _execute(traced, leaves, mesh, solution)
        diff = max(_difference(g, r) for g, r in zip(got, reference, strict=True))
        if not diff <= TOLERANCE:
            raise PlanMismatch(
                f"the sharded step differs from the unsharded one by {diff:.2e} (relative)"
            )
        Path(out, f"{rank}.ok").write_bytes(pickle.dumps(diff))
    except BaseException as error:
        message = (
            str(error).splitlines()[0]
            if isinstance(error, PlanMismatch)
            else traceback.format_exc()
        )
        Path(out, f"{rank}.error").write_bytes(pickle.dumps((time.time(), message)))
        raise SystemExit(1) from None  # reported by the parent, in one line
    finally:
        dist.destroy_process_group()


def _difference(got: torch.Tensor | None, want: torch.Tensor | None) -> float:
    if got is None or want is None:
        return 0.0 if got is None and want is None else math.inf
    got, want = got.double(), want.double()
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    return float((got - want).abs().max()) / scale if want.numel() else 0.0


@torch.no_grad()
def _execute(
    traced: Any, leaves: list[torch.Tensor], mesh: Any, solution: np.ndarray | None
) -> list:
    """Run the traced step: unsharded (``mesh`` None) or under the plan.
    Returns the loss and the gradients, whole."""
    runner = _Runner(traced, mesh, solution)
    env: dict[torch.fx.Node, Any] = {}
    values = iter(leaves)
    for node in traced.module.graph.nodes:
        if node.op == "placeholder":
            env[node] = runner.leaf(node, next(values))
        elif node.op == "call_function":
            env[node] = runner.call(node, env)
        elif node.op == "output":
            outs = [env[a] if isinstance(a, torch.fx.Node) else None for a in node.args[0]]
            return [o.full_tensor() if mesh is not None and o is not None else o for o in outs]
    raise PlanMismatch("the traced step has no output")


class _Runner:
    def __init__(self, traced: Any, mesh: Any, solution: np.ndarray | None) -> None:
        self.traced, self.mesh, self.solution = traced, mesh, solution
        self.index = {node: k for k, node in enumerate(traced.nodes)}

    def spec(self, node: torch.fx.Node) -> Any:
        k = self.index[node]
        return self.traced.menus[k].strategies[int(self.solution[k])]

    def leaf(self, node: torch.fx.Node, value: torch.Tensor) -> Any:
        if self.mesh is None:
            return value
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(value, self.mesh, list(self.spec(node).output_spec.placements))

    def call(self, node: torch.fx.Node, env: dict) -> Any:
        args = tree_map(lambda a: env[a] if isinstance(a, torch.fx.Node) else a, node.args)
        kwargs = dict(
            tree_map(lambda a: env[a] if isinstance(a, torch.fx.Node) else a, node.kwargs)
        )
        if kwargs.get("device") is not None:
            kwargs["device"] = torch.device("cpu")  # traced on the meta device
        if self.mesh is None or node not in self.index:
            return node.target(*args, **kwargs)
        spec = self.spec(node)
        if node.target is operator.getitem:
            return self.move(args[0][args[1]], spec.output_spec.placements)
        inputs = [
            a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, torch.fx.Node)
        ]
        if not inputs:  # a factory: made whole, then sliced
            return self.move(self.whole(node.target(*args, **kwargs)), spec.output_spec.placements)
        args, kwargs = self.placed(node, spec, args, kwargs)
        if node.name in self.traced.replicated:
            whole = tree_map(lambda a: a.to_local() if self.is_dtensor(a) else a, (args, kwargs))
            out = node.target(*whole[0], **whole[1])
            out = tree_map(lambda t: self.whole(t) if isinstance(t, torch.Tensor) else t, out)
        else:
            out = self.forced(node, spec, args, kwargs)
        self.check(node, spec, out)
        return out

    @staticmethod
    def is_dtensor(x: Any) -> bool:
        from torch.distributed.tensor import DTensor

        return isinstance(x, DTensor)

    def whole(self, t: torch.Tensor) -> Any:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.placement_types import Replicate

        return DTensor.from_local(t, self.mesh, [Replicate()] * self.mesh.ndim, run_check=False)

    def move(self, x: Any, placements: tuple) -> Any:
        """``x`` redistributed to ``placements`` (also to a Partial one, which
        ``DTensor.redistribute`` refuses)."""
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._dtensor_spec import DTensorSpec
        from torch.distributed.tensor._redistribute import redistribute_local_tensor

        if tuple(x.placements) == tuple(placements):
            return x
        target = DTensorSpec(self.mesh, tuple(placements), tensor_meta=x._spec.tensor_meta)
        local = redistribute_local_tensor(x._local_tensor, x._spec, target)
        return DTensor(local, target, requires_grad=False)

    def placed(self, node: torch.fx.Node, spec: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
        """The arguments with each tensor moved to the strategy's input placement."""
        flat, shape = tree_flatten((args, kwargs))
        wanted = iter(spec.input_specs)
        nodes = tree_flatten((node.args, node.kwargs))[0]
        for i, (value, source) in enumerate(zip(flat, nodes, strict=True)):
            if isinstance(source, torch.fx.Node) and self.is_dtensor(value):
                flat[i] = self.move(value, next(wanted).placements)
        return tree_unflatten(flat, shape)

    def forced(self, node: torch.fx.Node, spec: Any, args: Any, kwargs: Any) -> Any:
        """Run ``node`` with DTensor choosing exactly ``spec``."""
        import torch.distributed.tensor._sharding_prop as sharding
        from torch.distributed.tensor import DTensor

        want = _key(spec)
        original = sharding._select_min_cost_strategy

        def pick(strategy: Any, op_schema: Any = None) -> Any:
            for candidate in getattr(strategy, "strategies", ()):
                outs, ins = _key(candidate)
                if outs == want[0] and (candidate.input_specs is None or ins == want[1]):
                    return candidate
            raise PlanMismatch(f"{node.name} ({node.target}): DTensor offers no strategy {want}")

        propagator = DTensor._op_dispatcher.sharding_propagator
        sharding._select_min_cost_strategy = pick
        torch._C._clear_DTensor_sharding_propagator_cache()
        propagator.propagate_op_sharding.cache_clear()
        try:
            return node.target(*args, **kwargs)
        except Exception as error:
            cause = error if isinstance(error, PlanMismatch) else error.__cause__
            if isinstance(cause, PlanMismatch):
                raise PlanMismatch(str(cause)) from None
            raise
        finally:
            sharding._select_min_cost_strategy = original
            torch._C._clear_DTensor_sharding_propagator_cache()
            propagator.propagate_op_sharding.cache_clear()

    def check(self, node: torch.fx.Node, spec: Any, out: Any) -> None:
        planned = [None if s is None else tuple(s.placements) for s in output_specs(spec)]
        values = list(out) if isinstance(out, (tuple, list)) else [out]
        for want, value in zip(planned, values, strict=False):
            if want is not None and self.is_dtensor(value) and tuple(value.placements) != want:
                raise PlanMismatch(
                    f"{node.name} ({node.target}) produced {tuple(value.placements)}, "
                    f"the plan says {want}"
                )


def _key(spec: Any) -> tuple:
    outs = tuple(None if s is None else tuple(s.placements) for s in output_specs(spec))
    ins = tuple(tuple(s.placements) for s in spec.input_specs or ())
    return outs, ins
