"""Solving: ``maxshard solve`` and the contest's ``iopddl``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from ..driver import run_solve
from ..orchestrate.options import UsageError, options_for
from ..output import Progress, solution_line, write_line
from ..reader import InputError
from .app import app
from .common import (
    ProblemArgument,
    SolverOption,
    _declare,
    _exit_now,
    _fail,
    env_workers,
    peak_rss_mb,
    summary,
)


@app.command("solve", context_settings={"ignore_unknown_options": True})
def solve_cmd(
    problem: ProblemArgument,
    timeout: Annotated[float, typer.Argument(help="Time budget in seconds.")] = 10.0,
    out: Annotated[Path | None, typer.Option(help="Write a JSON result here.")] = None,
    seed: Annotated[
        int,
        typer.Option(
            help="Seed of the backends' random choices (results also depend on timing, "
            "unless --deterministic)."
        ),
    ] = 0,
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend",
            "-b",
            help="Backend to run (repeatable, in order: one per worker, the rest as "
            "workers free up). Default: the built-in plan (see `maxshard plans`).",
        ),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="Run the plan in this TOML file: stages of backends, one per worker "
            "(`maxshard plans --help` shows the form; `maxshard plans default` a full one).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    presolve: Annotated[
        bool,
        typer.Option(
            help="Run presolve. --no-presolve keeps only time compression and edge merging "
            "(one variable per node), to measure what presolve buys."
        ),
    ] = True,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Backends run at a time, one process each; they share their best "
            "solution while they run. Default: the cores this process may use "
            "(also settable as MAXSHARD_WORKERS).",
        ),
    ] = None,
    prove: Annotated[
        bool,
        typer.Option(
            "--prove",
            help="Spend the cores on closing the gap: one worker proves lower bounds "
            "(LP dual ascent) all along on large models, exact search on small ones; "
            "the others look for answers (its cases by model size and budget: "
            "maxshard plans prove).",
        ),
    ] = False,
    gap: Annotated[
        float | None,
        typer.Option(
            help="Stop as soon as the answer is proven within this relative gap "
            "(0.01: its cost at most 1% above the proven bound).",
        ),
    ] = None,
    deterministic: Annotated[
        bool,
        typer.Option(
            "--deterministic",
            help="Reproducible answers: the backends count work instead of reading "
            "the clock and share their finds only at barriers, so the answer, bound "
            "and trace depend only on the input, seed, workers and work budget. "
            "TIMEOUT still holds: a run it cuts short says so.",
        ),
    ] = False,
    work: Annotated[
        float | None,
        typer.Option(
            help="Work budget of a --deterministic run, in work units over all workers "
            "(a unit is about a second of one core's search). Default: what the plan "
            "case's measured pace fills in 0.65 of TIMEOUT on every worker, after the start-up "
            "estimated from the instance's size.",
        ),
    ] = None,
    solver: SolverOption = None,
) -> None:
    """Solve PROBLEM within TIMEOUT seconds; progress on stderr, solution on stdout.

    Without -b or --plan, the built-in plan runs: its case is chosen by the
    size of the presolved model (`maxshard plans` prints it; --prove runs the
    proving plan). A seed changes the backends' random choices; results also
    depend on timing, unless --deterministic.

    Every bound printed is proven: no solution costs less. The last progress
    line sums up cost, bound, gap and status (optimal once the bound meets
    the cost).
    """
    log = Progress(sys.stderr.fileno(), quiet)
    try:
        _declare(solver)
        options = options_for(
            timeout, plan=plan, backends=backend, prove=prove, seed=seed,
            workers=workers or env_workers(), gap=gap, presolve=presolve,
            deterministic=deterministic, work=work,
        )  # fmt: skip
        run = run_solve(problem, log, options)
    except (InputError, UsageError) as exc:
        _fail(str(exc))
    result = run.result()
    if not quiet:
        write_line(sys.stderr.fileno(), f"# {summary(run.best)}")
    write_line(sys.stdout.fileno(), solution_line(result.solution))
    run.stop()  # reaped once the answer is out
    if out is not None:
        record = result.record(problem=str(problem), peak_rss_mb=round(peak_rss_mb(), 1))
        out.write_bytes(msgspec.json.format(msgspec.json.encode(record)))
    _exit_now()


IOPDDL_USAGE = """usage: iopddl PROBLEM TIMEOUT_SECONDS [--gap G] [--prove] [--plan FILE]
                                      [--deterministic] [--work W]

Contest interface: solve PROBLEM (.json or .json.gz) within TIMEOUT_SECONDS.
Progress lines start with '#'; the last line is the solution [s0, s1, ...],
or [] when the instance has none. SIGTERM/SIGINT print the best so far.
It runs one backend per available core; MAXSHARD_WORKERS=N sets the number.

  --gap G   stop as soon as the answer is proven within relative gap G
            (0.01 = 1%); the line before the solution says what was proven
  --prove   the plan that closes the gap (see maxshard plans)
  --plan F  run the plan in file F (see maxshard plans --help)
  --deterministic  the same answer every time for the same input, seed and
            workers: work is counted, not timed (see maxshard solve --help)
  --work W  the work budget of a deterministic run (units, all workers)"""


def _value(arg: str, rest) -> str | None:
    """The value of ``--name=VALUE``, or of ``--name VALUE`` (the next argument)."""
    return arg.partition("=")[2] if "=" in arg else next(rest, None)


def _number(value: str | None, need: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        _fail(f"{need}, got {'nothing' if value is None else repr(value)}")


def iopddl(args: list[str]) -> None:
    """The contest entry point; arguments are parsed by hand so that a negative
    timeout is reported as such rather than as an unknown option."""
    if args and args[0] in ("-h", "--help"):
        print(IOPDDL_USAGE)
        return
    gap, prove, plan_file, rest = None, False, None, []
    deterministic, work = False, None
    it = iter(args)
    for arg in it:
        name = arg.partition("=")[0]
        if arg == "--prove":
            prove = True
        elif arg == "--deterministic":
            deterministic = True
        elif name == "--work":
            work = _number(_value(arg, it), "--work needs a number of work units")
        elif name == "--gap":
            gap = _number(_value(arg, it), "--gap needs a fraction such as 0.01")
        elif name == "--plan":
            value = _value(arg, it)
            if not value:
                _fail("--plan needs a plan file")
            plan_file = Path(value)
        else:
            rest.append(arg)
    if len(rest) != 2:
        _fail("expected 2 arguments: iopddl PROBLEM TIMEOUT_SECONDS (see --help)")
    try:
        timeout = float(rest[1])
    except ValueError:
        _fail(f"timeout must be a number of seconds, got {rest[1]!r}")
    log = Progress(sys.stdout.fileno(), live=False)  # harnesses read stdout as plain lines
    try:
        options = options_for(
            timeout, plan=plan_file, prove=prove, workers=env_workers(), gap=gap,
            deterministic=deterministic, work=work,
        )  # fmt: skip
        run = run_solve(Path(rest[0]), log, options)
    except (InputError, UsageError) as exc:
        _fail(str(exc))
    if gap is not None or prove or deterministic:
        log(summary(run.best))
    write_line(sys.stdout.fileno(), solution_line(run.result().solution))
    run.stop()
