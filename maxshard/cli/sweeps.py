"""Sweeps comparing solvers: ``compare`` and ``suite``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..orchestrate.options import UsageError
from ..reader import InputError
from .app import app
from .common import (
    SolverOption,
    _declare,
    _fail,
)


@app.command("compare")
def compare_cmd(
    problems: Annotated[
        list[str], typer.Argument(help="Problem files or glob patterns (quote them).")
    ],
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend",
            "-b",
            help="Backend to compare (repeatable; default: all); also 'default', 'prove', "
            "'det' (the default plan, --deterministic) or 'plan:FILE': maxshard's own plans or "
            "a plan file, on two workers each (then give --jobs 1 on two cores).",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per run.")] = 10.0,
    seeds: Annotated[int, typer.Option(min=1, help="Runs per instance and backend.")] = 1,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Directory for results.jsonl (runs already there are skipped: a sweep "
            "resumes) and the figures. Default: a new temporary directory."
        ),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(min=1, help="Runs at once on this machine (default: its cores).")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Run on a Ray cluster instead: its address, 'auto' (the one this machine "
            "belongs to) or 'local' (start one here). Needs pip install 'maxshard[ray]'."
        ),
    ] = None,
    figures: Annotated[bool, typer.Option(help="Draw the figures (needs matplotlib).")] = True,
    solver: SolverOption = None,
) -> None:
    """Compare backends: every instance x backend x seed alone, traced.

    Each run is one backend on one presolved instance for TIMEOUT seconds, every
    solution re-costed by the evaluator; its anytime trace (time, cost, bound)
    goes to OUT/results.jsonl. Prints per instance and backend: best cost, runs
    proved, time to best and to proof, final gap and primal integral, then per
    backend over the sweep (answered, best found, proved, primal integral); draws
    OUT/traces/<instance>.png (cost and bound over time) and OUT/profile.png
    (performance profile).
    """
    import glob
    import tempfile

    from .. import api, workbench

    paths: list[str] = []
    for pattern in problems:
        matched = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not matched:
            _fail(f"{pattern}: no file matches")
        paths += matched
    try:
        _declare(solver)
        names = backend or sorted(_available())
        workbench.check_backends(names)  # before any run
        directory = out or Path(tempfile.mkdtemp(prefix="maxshard-compare-"))
        records = api.compare(
            paths, names, timeout, seeds, directory, jobs, ray, figures, progress=True
        )
    except (UsageError, ValueError, FileNotFoundError, RuntimeError) as exc:  # PlanError too
        _fail(str(exc))
    typer.echo(workbench.markdown(workbench.summary(records)))
    typer.echo("\n" + workbench.markdown(workbench.totals(records)))
    typer.echo(f"\n# {len(records)} runs in {directory / 'results.jsonl'}")
    if figures and records:
        typer.echo(f"# figures: {directory / 'traces'}/*.png, {directory / 'profile.png'}")


def _available() -> dict:
    from ..registry import available

    return available()


@app.command("suite")
def suite_cmd(
    out: Annotated[Path, typer.Argument(help="Directory for the suite's instances.")],
    bench_dir: Annotated[Path, typer.Option(help="Where the shared benchmarks are.")] = Path(
        "../shared/benchmarks"
    ),
) -> None:
    """Write the standard suite of 36 instances for comparing solvers.

    34 connected regions cut from the 8 shared benchmarks (100 to 4,000 nodes,
    memory as tight as the source's; each leaves work after presolve) plus G
    and V whole. The same files on any machine; existing ones are kept."""
    from ..suite import make_suite

    try:
        paths = make_suite(bench_dir, out, log=typer.echo)
    except (InputError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"# {len(paths)} instances in {out}")
