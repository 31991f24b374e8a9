"""Command-line interface: ``maxshard`` (solve, evaluate, info, ...) and ``iopddl``.

``iopddl PROBLEM TIMEOUT`` is the contest contract: progress lines start with
``#`` and the last line printed is the solution ``[s0, s1, ...]`` (``[]`` when
the instance has none), printed before the timeout, also on SIGTERM/SIGINT.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from . import __version__
from .evaluate import evaluate
from .instance import FORBIDDEN, Instance
from .orchestrate import Best, Options, Plan, PlanError, Run, available_cores, kill_workers
from .orchestrate import load as load_plan
from .orchestrate.workers import dump_stacks_on_request
from .output import Progress, solution_line, write_line
from .reader import InputError, read_bytes, read_instance

app = typer.Typer(
    help="maxshard: solve the IOPDDL auto-sharding problem (ASPLOS/EuroSys 2025 contest).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit code 2."""


class Interrupted(BaseException):
    """A signal or the hard deadline stopped the solve. Not an ``Exception``: a
    handler that catches any error (the registry's for a broken plugin) must not
    swallow it. Measured: A at 6 s, presolve done at 5.8 s, the alarm came while
    the backends' modules were importing, became a "failed to load" error, and
    the run ended 0.6 s late."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _guard(deadline: float) -> None:
    """Turn SIGTERM, SIGINT and the deadline alarm into :class:`Interrupted`."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, _interrupt)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic() + 0.2))


def _unguard() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)


def run_solve(problem: Path, timeout: float, log: Progress, options: Options) -> Run:
    """Read and solve under the deadline; always returns what it has by then."""
    from .clock import deadline_for, process_start

    if not timeout > 0:
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout}")
    check_gap(options.gap)
    if options.work is not None and not options.work > 0:
        raise UsageError(f"--work must be a positive number of work units, got {options.work}")
    options = options.budgeted(timeout)
    deadline = deadline_for(timeout)
    # progress and trace times count from the process start, as the budget does
    run = Run(options, log, start=process_start())
    dump_stacks_on_request()  # kill -USR1: where is the run? (the workers do the same)
    _guard(deadline)
    try:
        run.solve(problem, deadline)
    except Interrupted as exc:
        log(f"stopped by {exc}")
    finally:
        _unguard()
        log.close()
    return run


def choose_plan(
    plan_file: Path | None, backends: list[str] | None, workers: int | None
) -> Plan | None:
    """The plan of ``--plan FILE`` or ``-b NAME ...`` (None: the built-in one);
    a UsageError names what is wrong with it, before any solving."""
    from .backend import BackendError
    from .orchestrate.plan import choose
    from .registry import check_names

    try:
        check_names(backends or [])
        return choose(plan_file, backends, workers or available_cores())
    except (BackendError, PlanError) as exc:
        raise UsageError(str(exc)) from None


def peak_rss_mb() -> float:
    """Largest resident set of this process or any of its finished workers."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, workers) / 1024


SolverOption = Annotated[
    list[str] | None,
    typer.Option(
        "--solver",
        help="Declare a command-line solver as backend NAME (repeatable): "
        "'NAME=FORMAT:COMMAND', FORMAT one of wcnf, opb, lp, mps, cfn, COMMAND with "
        "{model}, {timeout}, {answer}, {seed}; e.g. "
        "'mycbc=mps:cbc {model} -sec {timeout} -solve -solu {answer}'.",
    ),
]


def _declare(solvers: list[str] | None) -> None:
    """Make the --solver declarations known (here and to the workers)."""
    from .backend import BackendError
    from .backends.external import declare, parse_inline

    try:
        declare([parse_inline(text) for text in solvers or []])
    except BackendError as exc:
        raise UsageError(str(exc)) from None


def check_gap(gap: float | None) -> None:
    if gap is not None and not 0 <= gap < 1:
        raise UsageError(f"gap must be a fraction in [0, 1) (0.01 = 1%), got {gap}")


def summary(best: Best | None) -> str:
    """The closing progress line: what was found and what is proven of it."""
    if best is None or best.evaluation is None:
        status = best.status if best else "unknown"
        return f"no solution ({status})"
    ev, parts = best.evaluation, []
    parts.append(f"cost {ev.cost}")
    if best.lower_bound is not None:
        parts.append(f"bound {best.lower_bound} (gap {100 * (best.gap() or 0.0):.3f}%)")
    else:
        parts.append("no bound")
    parts.append(f"status {best.status}")
    if best.gap_reached_at is not None:
        unit = "s" if best.work is None else " work"
        parts.append(f"within the target gap at {best.gap_reached_at:.1f}{unit}")
    if best.work is not None:  # a deterministic run says whether it stayed so
        parts.append(f"deterministic: {'no, ' + best.cut if best.cut else 'yes'}")
    return "result: " + ", ".join(parts)


def env_workers() -> int | None:
    """Workers from MAXSHARD_WORKERS (the contest command takes no options)."""
    value = os.environ.get("MAXSHARD_WORKERS", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"MAXSHARD_WORKERS must be a positive integer, got {value!r}")
    return int(value)


def _fail(message: str) -> None:
    write_line(sys.stderr.fileno(), f"error: {message}")
    raise SystemExit(2)


@app.command("solve", context_settings={"ignore_unknown_options": True})
def solve_cmd(
    problem: Annotated[Path, typer.Argument(help="Problem file (.json or .json.gz).")],
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
            "(a unit is about a second of one core). Default: 0.25 of TIMEOUT per worker.",
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
        workers = workers or env_workers()
        chosen = choose_plan(plan, backend, workers)
        if work is not None and not deterministic:
            raise UsageError("--work is a budget of a --deterministic run: add --deterministic")
        options = Options(chosen, prove, seed, workers, gap, presolve, deterministic=deterministic,
                          work=work)  # fmt: skip
        run = run_solve(problem, timeout, log, options)
    except (InputError, UsageError) as exc:
        _fail(str(exc))
    result = run.result()
    if not quiet:
        write_line(sys.stderr.fileno(), f"# {summary(run.best)}")
    write_line(sys.stdout.fileno(), solution_line(result.solution))
    kill_workers()  # reaped once the answer is out
    if out is not None:
        record = result.record(problem=str(problem), peak_rss_mb=round(peak_rss_mb(), 1))
        out.write_bytes(msgspec.json.format(msgspec.json.encode(record)))
    _exit_now()


def _exit_now() -> None:
    """End the process now that the answer is out and the workers reaped, not
    after the interpreter's teardown: 0.1-0.3 s of freeing a large model, which
    harnesses that time the process count against the budget (A at a tenth:
    the answer at 5.74 s, the exit at 5.96 s)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _parse_solution(text: str) -> list[int]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise UsageError("the solution is empty")
    try:
        values = msgspec.json.decode(lines[-1], type=list[int])
    except msgspec.MsgspecError:
        raise UsageError(
            f"the solution's last line is not a list of integers: {lines[-1][:60]!r}"
        ) from None
    return values


@app.command("evaluate")
def evaluate_cmd(
    problem: Annotated[Path, typer.Argument(help="Problem file (.json or .json.gz).")],
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
    problem: Annotated[Path, typer.Argument(help="Problem file (.json or .json.gz).")],
    reduce: Annotated[
        bool, typer.Option("--reduce", help="Also run presolve, pass by pass.")
    ] = False,
) -> None:
    """Describe an instance: sizes, forbidden costs, memory tightness, presolve effect."""
    from .evaluate import all_min_usage

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
        from .reduce import Infeasible
        from .reduce import reduce as presolve

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


@app.command("backends")
def backends_cmd(solver: SolverOption = None) -> None:
    """List the backends, their capabilities and where they come from: the
    installed ones (entry points) and the command-line solvers declared in
    $MAXSHARD_SOLVERS, ~/.config/maxshard/solvers.toml or with --solver."""
    from .backend import BackendError
    from .backends.external import Spec
    from .registry import available, load

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
    from .orchestrate import plan as plans

    try:
        if check is not None:
            typer.echo(plans.describe(load_plan(check)))
        elif name is not None:
            typer.echo(plans.built_in_text(name), nl=False)
        else:
            typer.echo("\n".join(plans.describe(plans.built_in(n)) for n in plans.BUILT_IN))
    except PlanError as exc:
        _fail(str(exc))


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

    from .generate import cut, generate, to_problem, write_problem
    from .generate import tile as tiled

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
    problem: Annotated[Path, typer.Argument(help="Problem file (.json or .json.gz).")],
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
    from .formats import FormatError, Header, export, format_of
    from .model import fingerprint
    from .reduce import Infeasible, reduce

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
    from .formats import FormatError, read_header, restore
    from .model import fingerprint
    from .reduce import Infeasible, reduce

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

    from . import api, workbench

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
    from .registry import available

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
    from .suite import make_suite

    try:
        paths = make_suite(bench_dir, out, log=typer.echo)
    except (InputError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"# {len(paths)} instances in {out}")


@app.command("warmup")
def warmup_cmd() -> None:
    """Compile the numba kernels (local search, diffusion bound) now, once per install.

    numba caches them on disk; otherwise the first solve spends ~10 s of its
    budget on compiling them."""
    from .backends.local import warm_up

    typer.echo(f"# kernels ready in {warm_up():.1f}s")


@app.command("version")
def version_cmd() -> None:
    """Print the version."""
    typer.echo(__version__)


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
        workers = env_workers()
        if work is not None and not deterministic:
            raise UsageError("--work is a budget of a --deterministic run: add --deterministic")
        options = Options(choose_plan(plan_file, None, workers), prove, 0, workers, gap,
                          deterministic=deterministic, work=work)  # fmt: skip
        run = run_solve(Path(rest[0]), timeout, log, options)
    except (InputError, UsageError) as exc:
        _fail(str(exc))
    if gap is not None or prove or deterministic:
        log(summary(run.best))
    write_line(sys.stdout.fileno(), solution_line(run.result().solution))
    kill_workers()


def main() -> None:
    app()


def iopddl_main() -> None:
    iopddl(sys.argv[1:])
    _exit_now()


if __name__ == "__main__":
    main()
