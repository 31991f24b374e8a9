"""What the command groups share: choosing a plan, the closing summary,
workers from the environment, one-line errors, the fast exit."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from ..orchestrate import Best
from ..orchestrate.options import UsageError
from ..output import write_line


def peak_rss_mb() -> float:
    """Largest resident set of this process or any of its finished workers."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, workers) / 1024


#: the problem argument of every command that reads one
ProblemArgument = Annotated[Path, typer.Argument(help="Problem file (.json or .json.gz).")]

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
    from ..backend import BackendError
    from ..backends.external import declare, parse_inline

    try:
        declare([parse_inline(text) for text in solvers or []])
    except BackendError as exc:
        raise UsageError(str(exc)) from None


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
