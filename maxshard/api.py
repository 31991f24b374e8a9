"""The Python API: what the command line does, as functions returning values.

    import maxshard

    result = maxshard.solve("problem.json.gz", timeout=30)
    result.cost, result.lower_bound, result.status, result.solution
    result.trace  # [(seconds, best cost, best bound), ...] at every improvement

    records = maxshard.compare(["a.json", "b.json"], backends=["highs", "toulbar2"],
                               timeout=10, seeds=2, out="sweep/")

``solve`` runs the same plan as ``maxshard solve`` (or the named backends) in
worker processes and returns the best evaluator-checked solution. ``compare``
runs every instance x backend x seed alone (:mod:`maxshard.workbench`) and
returns one record per run; with ``out`` it also keeps them in
``out/results.jsonl`` (a later call skips the runs already there) and draws
the figures (:mod:`maxshard.figures`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from .instance import Instance
from .orchestrate import Plan, Run, SolveResult
from .orchestrate.options import options_for


def solve(
    problem: str | Path | Instance,
    timeout: float,
    backends: Sequence[str] | None = None,
    seed: int = 0,
    workers: int | None = None,
    log=None,
    gap: float | None = None,
    prove: bool = False,
    plan: str | Path | Plan | None = None,
    deterministic: bool = False,
    work: float | None = None,
    starts: Sequence[Sequence[int]] = (),
) -> SolveResult:
    """Solve ``problem`` (a file or an :class:`~maxshard.instance.Instance`) within
    ``timeout`` seconds from this call. ``backends``: run these (default: the
    built-in plan, or with ``prove`` the one that closes the gap); ``plan``: a
    plan file (or :class:`~maxshard.orchestrate.Plan`) to run instead; ``gap``:
    stop once the answer is proven within this relative gap (0.01: 1%);
    ``log``: a callable given each progress line; ``deterministic``: count work
    instead of reading the clock (the same answer for the same input, seed,
    workers and ``work``, the budget in work units over all workers; default:
    :func:`~maxshard.orchestrate.options.default_work`, ``timeout`` less the
    start-up estimated from the instance's size, at the plan case's pace),
    ``timeout`` still holding; ``starts``: answers to begin from (a strategy
    per node each, as in a solution line), priced by the evaluator like every
    answer (:class:`~maxshard.orchestrate.options.UsageError` if one is not
    an answer to ``problem``)."""
    start = time.monotonic()
    options = options_for(
        timeout, plan=plan, backends=backends, prove=prove, seed=seed, workers=workers,
        gap=gap, deterministic=deterministic, work=work,
    )  # fmt: skip
    run = Run(options, log or (lambda _line: None), start)
    try:
        run.solve(problem, start + timeout, starts=starts)
    finally:
        run.stop()
    return run.result()


def compare(
    problems: Sequence[str | Path],
    backends: Sequence[str],
    timeout: float = 10.0,
    seeds: int = 1,
    out: str | Path | None = None,
    jobs: int | None = None,
    ray: str | None = None,
    figures: bool = True,
    progress: bool = False,
) -> list[dict]:
    """Run each backend alone on each problem, ``seeds`` times, ``timeout`` seconds
    each; return the records (see :mod:`maxshard.workbench`). ``jobs`` runs at once
    on this machine (default: its cores), or ``ray``: a Ray address (``auto``, an
    address, ``local`` to start one here) to run them as Ray tasks."""
    import tempfile

    from . import workbench

    workbench.check_backends(backends)
    paths = [Path(p) for p in problems]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{missing[0]}: no such file")
    runs = workbench.plan_runs(paths, list(backends), seeds, timeout)
    directory = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="maxshard-"))
    bar = workbench.ProgressBar(len(runs)) if progress else None
    try:
        records = workbench.sweep(runs, directory / "results.jsonl", jobs, ray, bar)
    finally:
        if bar:
            bar.close()
    if out is not None and figures and records:
        from .figures import profile_figure, trace_figures

        trace_figures(records, directory / "traces")
        profile_figure(records, directory / "profile.png")
    return records
