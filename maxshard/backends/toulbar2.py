"""Cost function network solving with toulbar2 (pytoulbar2).

The reduced model maps one-to-one onto a weighted CSP: a variable per model
variable, unary and binary cost functions, and memory as one knapsack
constraint per kept time point (``sum of usages <= limit - base``). toulbar2's
depth-first branch and bound with soft arc consistency then proves optimality
on the small models (G in ~2 s) and finds excellent solutions on the harder
ones (V: below the contest's best).

Facts about pytoulbar2 that shape this module (measured with 1.4.0.1):

* costs are passed as doubles and are exact below 2**53; the forbidden cost
  10^18 exceeds its maximum cost, so it is passed as infinity (hard);
* ``Solve(timeLimit=...)`` counts whole CPU seconds and overshot 2x on a busy
  machine, and its dual bound was not a valid bound in the tests of issue 5;
  so the solve runs with a limit that ends before the deadline, every solution
  it prints is reported at once (anytime), and optimality is claimed only when
  toulbar2 prints ``Optimum:`` (a finished search), never from its bounds;
* it holds the GIL while solving, so its printed solutions are read by a
  forked reader process, which passes them on through ``report``.
"""

from __future__ import annotations

import math
import os
import resource
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..instance import FORBIDDEN
from ..model import Model


class Toulbar2:
    name = "toulbar2"
    capabilities = Capabilities(exact=True, anytime=True, memory=True, lower_bound=True)

    #: virtual arc consistency in preprocessing (toulbar2's ``vac=1``, as in the
    #: contest winner's exact pass). Measured on V (one run each, the other core
    #: busy): 1,617,084, the optimum, found at 52.8 s, where without VAC the
    #: search stayed at 1,618,348 for its 60 s; G proved in 0.33 s (0.39 s).
    vac = 1

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result:
        ub = None
        if incumbent is not None and model.fits(incumbent) and not model.forbidden(incumbent):
            ub = float(model.cost(incumbent) - model.offset)
        from pytoulbar2.pytb2 import Contradiction

        try:
            cfn = build(model, model.unary, seed, ub, memory=True, vac=self.vac)
        except Contradiction:  # posting already proves: no clean assignment fits
            if ub is None:
                return Result(Status.INFEASIBLE)
            return Result(Status.OPTIMAL, incumbent, model.cost(incumbent))
        seconds = math.floor(deadline - time.monotonic())
        if seconds < 1:
            return Result(Status.UNKNOWN)
        solved, x = run(cfn, model.nv, seconds, report)
        if x is not None:
            report(x)  # the reader process reported it already, but not to in-process callers
        if x is None:
            if solved and ub is None:
                return Result(Status.INFEASIBLE)
            if solved:  # nothing better than the incumbent exists
                return Result(Status.OPTIMAL, incumbent, model.cost(incumbent))
            return Result(Status.UNKNOWN)
        if solved:
            return Result(Status.OPTIMAL, x, model.cost(x))
        return Result(Status.FEASIBLE, x)


def float_costs(values: np.ndarray) -> list[float]:
    """Costs as toulbar2 takes them: doubles, forbidden ones infinite (hard)."""
    out = values.astype(np.float64)
    out[values >= FORBIDDEN] = math.inf
    return out.tolist()


def build(model: Model, unary: np.ndarray, seed: int, ub: float | None, memory: bool, vac: int = 0):
    """A fresh toulbar2 problem for ``model`` with the given unary costs."""
    import pytoulbar2

    # verbose=0 makes toulbar2 print "Optimum: ..." once it has proved optimality
    cfn = pytoulbar2.CFN(ubinit=ub, verbose=0, seed=seed, vac=vac)
    wcsp = cfn.CFN.wcsp
    for v in range(model.nv):
        wcsp.makeEnumeratedVariable(f"x{v}", 0, int(model.dom_size[v]) - 1)
    for v in range(model.nv):
        costs = float_costs(unary[model.dom_off[v] : model.dom_off[v + 1]])
        wcsp.postUnaryConstraint(v, costs, False)
    for e in range(model.m):
        u, v = int(model.edge_u[e]), int(model.edge_v[e])
        wcsp.postBinaryConstraint(u, v, float_costs(model.table(e).ravel()), False)
    if memory and model.limit is not None:
        for scope, params in knapsacks(model):
            wcsp.postKnapsackConstraint(scope, params, False, True)
    return cfn


def knapsacks(model: Model):
    """``sum usage <= limit - base`` per kept point, as toulbar2's ``>=`` knapsack
    (negated), skipping points that no assignment can overload."""
    assert model.limit is not None
    order = np.argsort(model.term_lo, kind="stable")
    for p in range(len(model.base)):
        live = order[(model.term_lo[order] <= p) & (p < model.term_hi[order])]
        if not len(live):
            continue
        cap = int(model.limit - model.base[p])
        if sum(int(model.usage_of(int(k)).max()) for k in live) <= cap:
            continue
        scope = [int(model.term_var[k]) for k in live]
        yield scope, knapsack_params(cap, [model.usage_of(int(k)) for k in live])


def knapsack_params(cap: int, uses: list[np.ndarray]) -> str:
    """toulbar2's knapsack parameters for ``sum of uses[i][x_i] <= cap``: its
    ``>=`` form, negated, listing each variable's nonzero usages."""
    parts = []
    for use in uses:
        nz = np.flatnonzero(use)
        parts.append(f"{len(nz)} " + " ".join(f"{j} {-int(use[j])}" for j in nz))
    return f"{-cap} " + " ".join(parts)


PROVED_OPTIMAL, PROVED_EMPTY = 3, 4  # reader exit codes: what toulbar2 said it proved


#: Stack toulbar2's search may use (its recursion deepens with the model: on a
#: 14,000-variable model, two copies of U, it overflowed the usual 8 MiB and
#: the worker died of a segmentation fault in its first relaxed solves).
STACK_BYTES = 1 << 30


def deep_stack() -> None:
    """Raise this process's soft stack limit to :data:`STACK_BYTES` (or the hard
    limit): the main thread's stack grows on demand up to it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))


def run(
    cfn, nv: int, seconds: int, report: Report, grace: int = 0
) -> tuple[bool, np.ndarray | None]:
    """Solve with a CPU-time limit; stream every printed solution to ``report``.

    With ``grace``, a search that has found nothing after ``seconds`` goes on,
    up to ``grace`` more seconds, until its first solution: the first solution
    of a hard relaxed solve came after 5.1-5.7 of its 6 CPU seconds on S (2.0-2.9
    of 3 on U), so a slightly slower machine lost whole rounds, and with them
    the loop's course.

    Returns (proved: toulbar2 finished its search, best solution or None). A
    finished search with no solution proves there is none below the initial bound.
    """
    if grace and threading.current_thread() is not threading.main_thread():
        grace = 0  # the stray-signal guard below needs the main thread
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    reader = os.fork()
    if reader == 0:  # child: parse toulbar2's stdout
        os.close(write_fd)
        status = 1
        try:
            if grace:
                found: list[bool] = []

                def seen(x: np.ndarray) -> None:
                    found.append(True)
                    report(x)

                lines = _watched(read_fd, parent, seconds, found)
                status = _forward(lines, nv, seen)
            else:
                status = _forward(os.fdopen(read_fd), nv, report)
        finally:
            os._exit(status)
    os.close(read_fd)
    deep_stack()
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(write_fd, 1)
    os.close(write_fd)
    try:
        result = cfn.Solve(showSolutions=1, timeLimit=seconds + grace)
    finally:
        if grace:  # the reader may stop a search that just ended: ignore that signal
            signal.signal(signal.SIGVTALRM, signal.SIG_IGN)
        sys.stdout.flush()
        os.dup2(saved, 1)  # closes the pipe's last write end: the reader sees EOF
        os.close(saved)
        _, status = os.waitpid(reader, 0)
    proved = os.waitstatus_to_exitcode(status) in (PROVED_OPTIMAL, PROVED_EMPTY)
    if not result:
        return proved, None
    return proved, np.asarray(result[0], dtype=np.int64)


def _watched(fd: int, parent: int, seconds: int, found: list) -> Iterator[str]:
    """The lines toulbar2 prints on ``fd``; once ``found`` holds a solution and
    the ``parent`` has spent ``seconds`` of user CPU time since the call, send
    it SIGVTALRM: toulbar2's own time-out (its timer is ITIMER_VIRTUAL), so its
    search ends as if its limit had been ``seconds``."""
    start, sent, rest = _user_seconds(parent), False, b""
    while True:
        if select.select([fd], [], [], 0.05)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            *done, rest = (rest + chunk).split(b"\n")
            for line in done:
                yield line.decode() + "\n"
        if found and not sent and _user_seconds(parent) - start >= seconds:
            os.kill(parent, signal.SIGVTALRM)
            sent = True
    if rest:
        yield rest.decode()


def _user_seconds(pid: int) -> float:
    """User CPU time of process ``pid`` (what ITIMER_VIRTUAL counts); wall time
    where /proc is missing."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return time.monotonic()


def _forward(lines, nv: int, report: Report) -> int:
    """Report each "New solution:" block; return what the search proved.

    A search cut short proves nothing: toulbar2 then prints "Time limit
    expired" and still ends with "No solution found ..." when it found none.
    """
    expect, status, expired = False, 0, False
    for line in lines:
        if line.startswith("New solution:"):
            expect = True
        elif expect:
            parts = line.split()
            if len(parts) == nv:
                report(np.array(parts, dtype=np.int64))
            expect = False
        elif line.startswith("Optimum:"):
            status = PROVED_OPTIMAL
        elif line.startswith("No solution"):
            status = PROVED_EMPTY
        elif "Time limit expired" in line:
            expired = True
    return 0 if expired else status
