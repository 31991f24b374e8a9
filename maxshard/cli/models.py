"""Instances and answers: ``evaluate``, ``info``, ``generate``, ``export``, ``restore``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from ..evaluate import evaluate
from ..instance import FORBIDDEN, Instance
from ..orchestrate.options import UsageError
from ..output import solution_line, write_line
from ..reader import InputError, read_bytes, read_instance
from .app import app
from .common import (
    ProblemArgument,
    _fail,
    _parse_solution,
)


@app.command("evaluate")
def evaluate_cmd(
    problem: ProblemArgument,
    solution: Annotated[
        str,
        typer.Argument(help="Solution file (its last line is used) or a literal list '[0, 1]'."),
    ],
) -> None:
    """Evaluate a solution exactly: cost, memory feasibility, forbidden picks.

    Exit code 0 when the contest evaluator would accept it, 1 when memory is exceeded.
    """
    try:
        inst = read_instance(problem)
        text = solution if solution.lstrip().startswith("[") else read_bytes(solution).decode()
        ev = evaluate(inst, _parse_solution(text))
    except (InputError, UsageError, ValueError) as exc:
        _fail(str(exc))
    limit = "none" if ev.usage_limit is None else str(ev.usage_limit)
    typer.echo(f"cost: {ev.cost}")
    typer.echo(f"feasible: {'yes' if ev.feasible else 'no'}")
    typer.echo(f"peak usage: {ev.peak} (limit {limit})")
    if ev.first_violation is not None:
        typer.echo(f"first time over the limit: {ev.first_violation}")
    typer.echo(f"forbidden picks: {ev.forbidden}")
    raise typer.Exit(0 if ev.feasible else 1)


@app.command("info")
def info_cmd(
    problem: ProblemArgument,
    reduce: Annotated[
        bool, typer.Option("--reduce", help="Also run presolve, pass by pass.")
    ] = False,
) -> None:
    """Describe an instance: sizes, forbidden costs, memory tightness, presolve effect."""
    from ..evaluate import all_min_usage

    try:
        inst = read_instance(problem)
    except InputError as exc:
        _fail(str(exc))
    ns = inst.n_strategies
    live = inst.lo < inst.hi
    min_peak = evaluate(inst, all_min_usage(inst)).peak
    limit = inst.usage_limit
    typer.echo(f"name: {inst.name or '-'}")
    single, dead = int((ns == 1).sum()), int((~live).sum())
    typer.echo(f"nodes: {inst.n} ({single} with one strategy, {dead} never live)")
    per = f"per node {ns.min()}..{ns.max()}, mean {ns.mean():.1f}"
    typer.echo(f"strategies: {int(ns.sum())} ({per})")
    typer.echo(f"edges: {inst.m} ({len(inst.edge_cost)} table entries)")
    typer.echo(
        f"forbidden (10^18) costs: {int((inst.cost >= FORBIDDEN).sum())} node, "
        f"{int((inst.edge_cost >= FORBIDDEN).sum())} edge entries"
    )
    span = f"{inst.lo[live].min()}..{inst.hi[live].max()}" if live.any() else "-"
    typer.echo(f"time span: {span}")
    if limit is None:
        typer.echo(f"usage limit: none (min-usage peak {min_peak})")
    else:
        ratio = limit / max(min_peak, 1)
        typer.echo(f"usage limit: {limit} (min-usage peak {min_peak}, limit/peak {ratio:.3f})")
    if reduce:
        from ..reduce import Infeasible
        from ..reduce import reduce as presolve

        cols = ["variables", "edges", "values", "table entries", "time points", "memory terms"]
        typer.echo("\n| pass | " + " | ".join(cols) + " | seconds |")
        typer.echo("|---" * (len(cols) + 2) + "|")

        def row(name: str, stats: dict[str, int], seconds: float) -> None:
            typer.echo(
                f"| {name} | " + " | ".join(str(stats[c]) for c in cols) + f" | {seconds:.2f} |"
            )

        start = time.perf_counter()
        try:
            presolve(inst, row)
        except Infeasible as exc:
            typer.echo(f"infeasible: {exc}")
        typer.echo(f"presolve total: {time.perf_counter() - start:.2f} s")


@app.command("generate")
def generate_cmd(
    out: Annotated[
        Path, typer.Argument(help="Where to write the JSON instance (.gz: compressed).")
    ],
    source: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Cut from (with --nodes) or tile (with --tile) this real instance "
            "instead of making a random one.",
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            min=1, help="Number of nodes (random: default 20; --from: a connected region)."
        ),
    ] = None,
    tile: Annotated[
        int,
        typer.Option(
            min=1,
            help="With --from: lay this many copies one after another in time, joined by "
            "zero-cost edges (the optimum is this many times the source's).",
        ),
    ] = 1,
    edges: Annotated[
        int | None, typer.Option(min=0, help="Random: number of edges (default 1.5 x nodes).")
    ] = None,
    strategies: Annotated[int, typer.Option(min=1, help="Random: most strategies per node.")] = 3,
    forbidden: Annotated[
        float, typer.Option(help="Random: share of forbidden (10^18) table entries.")
    ] = 0.1,
    tightness: Annotated[
        float, typer.Option(help="Random: 0 = tightest feasible limit, 1 = loose.")
    ] = 0.3,
    seed: Annotated[int, typer.Option(help="Random seed (of the instance, or of the cut).")] = 0,
) -> None:
    """Write an instance for tests and comparisons.

    Random (default): forbidden costs, parallel edges and tight memory. With
    --from BENCH --nodes N: a connected region of N nodes of a real instance,
    its usage limit as tight as the source's (same ratio to the all-minimum-usage
    peak). With --from BENCH --tile K: K copies in time, optimum K x the source's.
    """

    from ..generate import cut, generate, to_problem, write_problem
    from ..generate import tile as tiled

    if source is None:
        if tile != 1:
            _fail("--tile needs --from: the instance to tile")
        problem = generate(nodes or 20, edges, strategies, forbidden, tightness, seed=seed)
    else:
        try:
            inst = read_instance(source)
            name = inst.name or source.name.split(".")[0]
            if nodes is not None:
                inst = cut(inst, nodes, seed)
                name += f"-cut{nodes}-s{seed}"
            if tile > 1:
                inst = tiled(inst, tile)
                name += f"-x{tile}"
        except (InputError, ValueError) as exc:
            _fail(str(exc))
        problem = to_problem(inst, name)
    write_problem(problem, out)


@app.command("export")
def export_cmd(
    problem: ProblemArgument,
    out: Annotated[
        Path,
        typer.Argument(
            help="Where to write the model: .wcnf, .opb, .lp, .mps or .cfn (add .gz or "
            ".xz to compress; LP and MPS only plain)."
        ),
    ],
    format: Annotated[
        str | None,
        typer.Option("--format", "-f", help="wcnf, opb, lp, mps or cfn (default: OUT's suffix)."),
    ] = None,
    presolve: Annotated[
        bool,
        typer.Option(help="Export the presolved model (--no-presolve: one variable per node)."),
    ] = True,
) -> None:
    """Write PROBLEM's model for other solvers: MaxSAT (WCNF), pseudo-Boolean (OPB),
    MIP (LP, MPS) or cost function network (CFN), each exact.

    Costs are the model's integer costs, forbidden picks are hard, memory is
    exact (linear or pseudo-Boolean rows; for WCNF binary adders, whose size the
    file's header states). The file's first lines say what it is, including a
    fingerprint of the model: `maxshard restore` turns a solver's answer into a
    contest solution.
    """
    from ..formats import FormatError, Header, export, format_of
    from ..model import fingerprint
    from ..reduce import Infeasible, reduce

    try:
        fmt = format_of(out, format)
        if fmt in ("lp", "mps") and out.suffix.lower() in (".gz", ".xz"):
            raise FormatError("LP and MPS files are written plain (HiGHS and CBC read them so)")
        inst = read_instance(problem)
        start = time.perf_counter()
        model = reduce(inst, passes=presolve)
        header = Header(fmt, presolve, fingerprint(model), _problem_name(inst, problem))
        sizes = export(model, out, header)
    except (InputError, FormatError, Infeasible, OSError) as exc:
        _fail(str(exc))
    seconds = time.perf_counter() - start
    megabytes = out.stat().st_size / 1e6
    detail = ", ".join(f"{v} {k}" for k, v in sizes.items())
    typer.echo(f"# wrote {out} ({fmt}, {megabytes:.1f} MB, {seconds:.1f} s): {detail}")


def _problem_name(inst: Instance, path: Path) -> str:
    name = inst.name or path.name.split(".")[0]
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "problem"


@app.command("restore")
def restore_cmd(
    problem: Annotated[Path, typer.Argument(help="The problem file the model was exported from.")],
    model_file: Annotated[Path, typer.Argument(help="The file `maxshard export` wrote.")],
    answer: Annotated[
        Path,
        typer.Argument(
            help="The solver's answer ('-': standard input): a MaxSAT or PB 'v' line, a MIP "
            "solution file (HiGHS, CBC, SCIP, Gurobi), or toulbar2's values."
        ),
    ],
) -> None:
    """Turn an outside solver's answer into a contest solution and check it.

    Prints the evaluated cost, then the solution line [s0, s1, ...]. An answer
    that is malformed, incomplete, for another model, or that does not fit in
    memory ends in a one-line error and exit code 2.
    """
    from ..formats import FormatError, read_header, restore
    from ..model import fingerprint
    from ..reduce import Infeasible, reduce

    try:
        inst = read_instance(problem)
        header = read_header(model_file)
        model = reduce(inst, passes=header.presolve)
        if fingerprint(model) != header.fingerprint:
            raise FormatError(
                f"{model_file} was not exported from {problem} (its model fingerprint differs)"
            )
        text = sys.stdin.read() if str(answer) == "-" else _read_text(answer)
        x = restore(model, header.format, text)
        solution = model.reconstruct(x)
        ev = evaluate(inst, solution)
    except (InputError, FormatError, Infeasible) as exc:
        _fail(str(exc))
    if not ev.feasible:
        _fail(
            f"the answer does not fit in memory: usage {ev.peak} over the limit "
            f"{ev.usage_limit} at time {ev.first_violation}"
        )
    picks = f" ({ev.forbidden} forbidden picks)" if ev.forbidden else ""
    typer.echo(f"# cost {ev.cost}{picks}, fits in memory (peak {ev.peak})")
    write_line(sys.stdout.fileno(), solution_line(solution))


def _read_text(path: Path) -> str:
    try:
        return read_bytes(path).decode(errors="replace")
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None
