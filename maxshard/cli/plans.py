"""Plans and backends: ``plans``, ``backends``, ``warmup``, ``version``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import __version__
from ..orchestrate import PlanError
from ..orchestrate import load as load_plan
from ..orchestrate.options import UsageError
from .app import app
from .common import (
    SolverOption,
    _declare,
    _fail,
)


@app.command("backends")
def backends_cmd(solver: SolverOption = None) -> None:
    """List the backends, their capabilities and where they come from: the
    installed ones (entry points) and the command-line solvers declared in
    $MAXSHARD_SOLVERS, ~/.config/maxshard/solvers.toml or with --solver."""
    from ..backend import BackendError
    from ..backends.external import Spec
    from ..registry import available, load

    try:
        _declare(solver)
        found = available()
    except (BackendError, UsageError) as exc:
        _fail(str(exc))
    for name, ep in sorted(found.items()):
        try:
            b = load(name)
        except BackendError as exc:
            typer.echo(f"{name}: unavailable ({exc})")
            continue
        caps = b.capabilities.listed()
        if isinstance(ep, Spec):
            where = f"external {ep.format}: {ep.command}"
        else:
            where = f"{ep.value}, " + (ep.dist.name + " " + ep.dist.version if ep.dist else "?")
        typer.echo(f"{name}: {', '.join(caps) or '-'} [{where}]")


@app.command("plans")
def plans_cmd(
    name: Annotated[
        str | None,
        typer.Argument(help="Print this built-in plan's file (default or prove), to copy."),
    ] = None,
    check: Annotated[
        Path | None, typer.Option(help="Check this plan file and describe it.")
    ] = None,
) -> None:
    """Describe the built-in plans, print one as a file, or check a plan file.

    A plan is a TOML file of stages, each a share of the time and the
    backends its workers run (one per worker, in turn)::

        \\[\\[stage]]
        share = 0.6
        backends = ["lagrange", "mybackend"]

        \\[\\[stage]]
        share = 0.4
        backends = ["lns", "lns"]

    Run one with `maxshard solve PROBLEM T --plan FILE`. A stage may also set
    repeat, queue, switch (the leader switch) and inherit; a plan may be a list
    of \\[\\[case]] tables chosen by the model's size, each with a `when` table
    (points_max, variables_min, variables_max, workers_min, workers_max,
    seconds_min, seconds_max; `maxshard plans default` shows both forms).
    """
    from ..orchestrate import plan as plans

    try:
        if check is not None:
            typer.echo(plans.describe(load_plan(check)))
        elif name is not None:
            typer.echo(plans.built_in_text(name), nl=False)
        else:
            typer.echo("\n".join(plans.describe(plans.built_in(n)) for n in plans.BUILT_IN))
    except PlanError as exc:
        _fail(str(exc))


@app.command("warmup")
def warmup_cmd() -> None:
    """Compile the numba kernels (local search, diffusion bound) now, once per install.

    numba caches them on disk; otherwise the first solve spends ~10 s of its
    budget on compiling them."""
    from ..search.local import warm_up

    typer.echo(f"# kernels ready in {warm_up():.1f}s")


@app.command("version")
def version_cmd() -> None:
    """Print the version."""
    typer.echo(__version__)
