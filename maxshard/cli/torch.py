"""``maxshard torch plan|export``: the PyTorch front-end on the command line.

torch is imported only when a command runs, so the rest of the CLI starts
as fast without it, and a missing extra is a one-line error."""

from __future__ import annotations

import importlib
import importlib.util
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import _fail

app = typer.Typer(
    help="Plan the sharding of a PyTorch model (needs the extra: pip install 'maxshard\\[torch]').",
    no_args_is_help=True,
)

FactoryArgument = Annotated[
    str,
    typer.Argument(
        metavar="MODULE:FACTORY",
        help="A function returning (model, example_args), e.g. maxshard.torch.examples:gpt2 "
        "(a module path or a .py file, then a colon and the function's name).",
    ),
]
MeshOption = Annotated[
    str, typer.Option("--mesh", help="Devices per mesh dimension, e.g. 8, 2x4 or 2x2x2.")
]
MemoryOption = Annotated[
    str | None,
    typer.Option("--memory", help="Device memory, e.g. 16GB or 512MiB (default: no limit)."),
]
StatesOption = Annotated[
    int,
    typer.Option(
        "--optimizer-states", help="Parameter-sized optimizer tensors per parameter (Adam: 2)."
    ),
]


def _torch() -> Any:
    try:
        import maxshard.torch as mt
    except ImportError as exc:
        _fail(f"the torch front-end needs its extra: pip install 'maxshard[torch]' ({exc})")
    return mt


def load_factory(spec: str) -> tuple[Any, Any]:
    """Call ``MODULE:FACTORY`` and return its ``(model, example_args)``."""
    module_name, _, function = spec.rpartition(":")
    if not module_name or not function:
        _fail(f"{spec!r} is not MODULE:FACTORY (e.g. maxshard.torch.examples:gpt2)")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                _fail(f"no such file: {module_name}")
            loaded = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is one line
        _fail(f"cannot import {module_name}: {type(exc).__name__}: {exc}")
    factory = getattr(module, function, None)
    if not callable(factory):
        _fail(f"{module_name} has no function {function!r}")
    try:
        made = factory()
    except Exception as exc:  # noqa: BLE001
        _fail(
            f"{spec} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
    if not (isinstance(made, tuple) and len(made) == 2):
        _fail(f"{spec} must return (model, example_args), got {type(made).__name__}")
    return made


@app.command("plan")
def plan_cmd(
    factory: FactoryArgument,
    mesh: MeshOption = "2x4",
    memory: MemoryOption = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds for the solver.")] = 10.0,
    deterministic: Annotated[
        bool,
        typer.Option("--deterministic", help="The same plan every time (work counted, not timed)."),
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the solver.")] = 0,
    optimizer_states: StatesOption = 0,
    out: Annotated[Path | None, typer.Option("--out", help="Write the plan as JSON here.")] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Run the plan on a gloo group, one process per device, and check it."
        ),
    ] = False,
) -> None:
    """Trace one training step of the model, solve its sharding and print the
    plan beside the data-parallel, fully-sharded and Megatron baselines."""
    import msgspec

    mt = _torch()
    if not timeout > 0:
        _fail(f"timeout must be a positive number of seconds, got {timeout}")
    model, args = load_factory(factory)
    started = time.perf_counter()
    try:
        plan = mt.plan(model, args, mesh=mesh, memory=memory, timeout=timeout,
                       deterministic=deterministic, seed=seed,
                       optimizer_states=optimizer_states)  # fmt: skip
    except mt.TorchPlanError as exc:
        _fail(str(exc))
    print(plan.summary())
    if deterministic:
        print(f"deterministic: {'yes' if plan.deterministic else 'no'}")
    print(f"wall time {time.perf_counter() - started:.1f} s")
    if out is not None:
        out.write_bytes(msgspec.json.format(msgspec.json.encode(plan.to_json())))
    if verify:
        try:
            difference = mt.verify(plan, model, args)
        except mt.TorchPlanError as exc:
            _fail(f"verify: {exc}")
        shape = "x".join(map(str, plan.traced.mesh))
        print(
            f"verified on a {shape} gloo group: loss, gradients within {difference:.1e} (relative)"
        )


@app.command("export")
def export_cmd(
    factory: FactoryArgument,
    out: Annotated[Path, typer.Argument(help="The instance file (.json or .json.gz).")],
    mesh: MeshOption = "2x4",
    memory: MemoryOption = None,
    optimizer_states: StatesOption = 0,
) -> None:
    """Write the model's sharding problem as a contest instance: every other
    maxshard command then works on it."""
    mt = _torch()
    model, args = load_factory(factory)
    try:
        traced = mt.trace(model, args, mesh=mesh, memory=memory, optimizer_states=optimizer_states)
    except mt.TorchPlanError as exc:
        _fail(str(exc))
    traced.write(out)
    stats = ", ".join(f"{v} {k}" for k, v in traced.stats().items())
    print(f"wrote {out}: {stats}")
