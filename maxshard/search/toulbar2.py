"""The toulbar2 driver: every toulbar2 problem of maxshard is built, posted and
solved here (the ``toulbar2`` backend's whole model, ``lns``'s neighbourhoods,
``lagrange``'s relaxed problems).


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
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from .. import work
from ..backend import Report
from ..csr import groups
from ..instance import FORBIDDEN
from ..knapsack import sparse_knapsacks
from ..model import Model
from ..output import stdout_to
from .toulbar2_limits import budget, revisits, setup


def upper_bound(cost: int) -> float:
    """``cost`` as toulbar2's initial bound (solutions must cost less): a double
    not below it, so that no solution cheaper than ``cost`` is cut off."""
    ub = float(cost)
    return ub if ub >= cost else math.nextafter(ub, math.inf)


def float_costs(values: np.ndarray) -> np.ndarray:
    """Costs as toulbar2 takes them: doubles, forbidden ones infinite (hard)."""
    out = values.astype(np.float64)
    out[values >= FORBIDDEN] = math.inf
    return out


#: toulbar2's own value of ``hbfsGlobalLimit`` (the backtracks its hybrid
#: best-first search may spend in depth-first probes before it gives up on them)
HBFS_GLOBAL_LIMIT = 32768


def load() -> None:
    """Import pytoulbar2 (its shared library) now, not at the first problem."""
    import pytoulbar2  # noqa: F401


def new_problem(ub: float | None, seed: int, verbose: int = -1, vac: int = 0, hbfs: int = 1):
    """A fresh, empty pytoulbar2 problem: every toulbar2 problem of maxshard
    (the whole model's here, a neighbourhood's in :mod:`.lns`) starts here.

    toulbar2's options are process-wide, and ``pytoulbar2.CFN`` resets only
    some of them: the search method (``hbfs``, 1: hybrid best-first, 0:
    depth-first) is set here for each problem, because toulbar2 turns it off
    for good when a preprocessing ends in a contradiction or a time-out
    (measured: in an ``lns`` worker on N, from its 8th neighbourhood on, every
    solve was depth-first), and a restarted search turns it off on purpose."""
    import pytoulbar2

    cfn = pytoulbar2.CFN(ubinit=ub, verbose=verbose, seed=seed, vac=vac)
    cfn.Option.hbfs = hbfs
    cfn.Option.hbfsGlobalLimit = HBFS_GLOBAL_LIMIT
    # what was posted, counted by post and post_knapsack for node_price
    cfn.values = cfn.entries = cfn.revisits = cfn.pairs = cfn.knapsacks = 0
    return cfn


def post(
    cfn,
    dom_off: np.ndarray,
    unary: np.ndarray,
    edge_i: np.ndarray,
    edge_j: np.ndarray,
    table_off: np.ndarray,
    tables: np.ndarray,
) -> None:
    """Variables with the domains ``dom_off`` (CSR offsets), their unary costs
    (flat int64, laid out by ``dom_off``) and binary tables between ``edge_i[k]``
    and ``edge_j[k]`` (row-major, ``tables[table_off[k]:table_off[k + 1]]``),
    forbidden costs hard.

    The costs go in as arrays, one call per shape (domain size, or pair of
    them), not as a Python list per function: posting a neighbourhood of N
    (about 800 tables) took a fifth of ``lns``'s time that way."""
    wcsp = cfn.CFN.wcsp
    sizes = np.diff(dom_off)
    rows, cols = sizes[edge_i], sizes[edge_j]  # each table's shape
    cfn.values, cfn.entries = int(dom_off[-1]), int(table_off[-1])
    cfn.revisits = revisits(rows, cols)
    work.count("tb2-entry", cfn.values + cfn.entries)
    work.count("call", 5 + len(sizes) / 50)  # a problem's fixed cost, and its Python loops
    for i, size in enumerate(sizes.tolist()):
        wcsp.makeEnumeratedVariable(f"x{i}", 0, int(size) - 1)
    costs = float_costs(unary)
    for where in groups(sizes):
        each = costs[dom_off[where][:, None] + np.arange(sizes[where[0]])]
        wcsp.postUnaryVecConstraints(where, each, False)
    if not len(edge_i):
        return
    table_costs = float_costs(tables)
    for where in groups(rows * (int(sizes.max()) + 1) + cols):
        a, b = int(rows[where[0]]), int(cols[where[0]])
        block = table_costs[table_off[where][:, None] + np.arange(a * b)]
        scopes = np.stack([edge_i[where], edge_j[where]], axis=1)
        wcsp.postMultBinaryVecConstraints(scopes, block.reshape(-1, a, b), False)


def solve_quietly(cfn, seconds: float) -> np.ndarray | None:
    """A short solve, its output thrown away: the best assignment found, or None.
    (:func:`run` is the long, watched and streamed kind.)"""
    with stdout_to(), budget(cfn, seconds) as limit:
        result = _solve(cfn, timeLimit=limit)
    return np.asarray(result[0], dtype=np.int64) if result else None


def _solve(cfn, **options):
    """``cfn.Solve(**options)``; None when its time ran out before the search
    began: toulbar2 raises ``SolverOut`` then (its preprocessing, VAC on a
    restarted search, overran what was left; seen at the end of a 70 s run)."""
    from pytoulbar2.pytb2 import SolverOut

    try:
        return cfn.Solve(**options)
    except SolverOut:
        return None


def build(
    model: Model,
    unary: np.ndarray,
    seed: int,
    ub: float | None,
    memory: bool,
    vac: int = 0,
    hbfs: int = 1,
):
    """A fresh toulbar2 problem for ``model`` with the given unary costs."""
    # verbose=0 makes toulbar2 print "Optimum: ..." once it has proved optimality
    cfn = new_problem(ub, seed, verbose=0, vac=vac, hbfs=hbfs)
    post(cfn, model.dom_off, unary, model.edge_u, model.edge_v, model.edge_off, model.edge_cost)
    if memory and model.limit is not None:
        for scope, params in knapsacks(model):
            post_knapsack(cfn, scope, params)
    return cfn


def post_knapsack(cfn, scope: list[int], params: str) -> None:
    """Post toulbar2's knapsack ``params`` (:func:`knapsack_params`) over the
    variables ``scope``; its value-usage pairs count in :func:`~.toulbar2_limits.node_price`."""
    cfn.CFN.wcsp.postKnapsackConstraint(scope, params, False, True)
    # the parameters are the capacity, then per variable its count and its pairs
    pairs = (params.count(" ") - len(scope)) // 2
    cfn.pairs += pairs
    cfn.knapsacks += 1
    work.count("tb2-entry", 2 * pairs)  # a pair takes about two entries' time to post


def knapsacks(model: Model):
    """(scope, parameters) of toulbar2's knapsack at each binding point
    (:func:`maxshard.knapsack.sparse_knapsacks`): :func:`knapsack_params`'
    text, written from the flat arrays at once (a 1,000,000-pair model took
    1.8 s one variable at a time)."""
    for k in sparse_knapsacks(model):
        counts = np.diff(k.off)
        owner = np.repeat(np.arange(1, len(counts) + 1), counts)  # counts before a pair
        tokens = np.empty(1 + len(counts) + 2 * len(k.values), dtype=np.int64)
        tokens[0] = -k.room
        tokens[1 + 2 * k.off[:-1] + np.arange(len(counts))] = counts
        at = 1 + 2 * np.arange(len(k.values)) + owner
        tokens[at], tokens[at + 1] = k.values, -k.weights
        yield k.variables.tolist(), " ".join(map(str, tokens.tolist()))


def knapsack_params(cap: int, uses: list[np.ndarray]) -> str:
    """toulbar2's knapsack parameters for ``sum of uses[i][x_i] <= cap``: its
    ``>=`` form, negated, listing each variable's nonzero usages. (For one
    knapsack at a time, as ``lns`` posts them: :func:`knapsacks` writes the
    same text from flat arrays, faster for many, slower for one.)"""
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
    cfn,
    nv: int,
    seconds: float,
    report: Report,
    grace: int = 0,
    quiet: float | None = None,
    beaten: Callable[[float], bool] | None = None,
    outpaced: float = 0.0,
) -> tuple[bool, np.ndarray | None]:
    """Solve with a CPU-time limit; stream every printed solution to ``report``.

    toulbar2's own limit counts whole seconds: ``seconds`` over one with a
    fraction is rounded up for it, and the reader ends the search once that
    many seconds (and ``grace``) have passed on the clock (a stage's last
    solve had 2 of its 2.9 seconds left that way, and V's answer at a
    twentieth of its limit depended on the second lost).

    With ``grace``, a search that has found nothing after ``seconds`` goes on,
    up to ``grace`` more seconds, until its first solution: the first solution
    of a hard relaxed solve came after 5.1-5.7 of its 6 CPU seconds on S (2.0-2.9
    of 3 on U), so a slightly slower machine lost whole rounds, and with them
    the loop's course. With ``quiet``, a search that has found a solution and
    then nothing better for ``quiet`` seconds ends there (to restart, see
    :meth:`Toulbar2.solve`). With ``beaten``, whether another worker's answer
    costs less than a fraction of the search's bound (the reader asks it, in
    its own process, every 50 ms), a search with no answer of its own ends:
    at once below ``outpaced``; below the bound itself, with ``quiet``,
    ``quiet`` seconds after its start.

    Returns (proved: toulbar2 finished its search, best solution or None). A
    finished search with no solution proves there is none below the initial bound.
    A deterministic search whose knapsacks' preprocessing (:func:`~.toulbar2_limits.setup`)
    would take more than ``seconds`` is not started: (False, None).
    """
    if not _main_thread() or work.deterministic():
        # the stray-signal guard below needs the main thread; a deterministic
        # search has no clock to watch (its limit counts backtracks)
        grace, quiet, beaten = 0, None, None
    if work.deterministic() and setup(cfn) > seconds:
        # its preprocessing alone would overrun its charge: not started
        return False, None
    until = None
    if seconds > 1 and seconds % 1 and not work.deterministic() and _main_thread():
        until, seconds = time.monotonic() + seconds + grace, math.ceil(seconds)
    with budget(cfn, seconds + grace) as limit:  # (a reader forked in it stamps its end)
        stop = Stop(os.getpid(), limit - grace if grace else None, quiet, beaten, outpaced, until)
        return _run(cfn, nv, limit, report, stop)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _run(cfn, nv: int, limit: int, report: Report, stop: Stop):
    watched = stop.watches()
    read_fd, write_fd = os.pipe()
    reader = os.fork()
    if reader == 0:  # child: parse toulbar2's stdout
        os.close(write_fd)
        status = 1
        try:
            if watched:

                def seen(x: np.ndarray) -> None:
                    stop.seen()
                    report(x)

                status = _forward(_watched(read_fd, stop.parent, stop), nv, seen)
            else:
                status = _forward(os.fdopen(read_fd), nv, report)
        finally:
            os._exit(status)
    os.close(read_fd)
    deep_stack()
    try:
        with stdout_to(write_fd):
            os.close(write_fd)  # fd 1 is now the pipe's only write end
            try:
                result = _solve(cfn, showSolutions=1, timeLimit=limit)
            finally:
                if watched:  # the reader may stop a search that just ended: ignore that signal
                    signal.signal(signal.SIGVTALRM, signal.SIG_IGN)
        # fd 1 restored: the pipe's last write end closed, the reader sees EOF
    finally:
        _, status = os.waitpid(reader, 0)
    proved = os.waitstatus_to_exitcode(status) in (PROVED_OPTIMAL, PROVED_EMPTY)
    # a search held to its backtrack limit (see budget) may still print "Optimum:"
    # or "No solution" (a deterministic run on a LLaMA instance claimed a cost that
    # lns then beat; tests/test_backends.py has two small instances)
    proved = proved and cfn.GetNbBacktracks() < cfn.Option.backtrackLimit
    if not result:
        return proved, None
    return proved, np.asarray(result[0], dtype=np.int64)


class Stop:
    """When the reader ends toulbar2's search early (see :func:`run`). With no
    solution of its own: at once when ``beaten(outpaced)``, ``quiet`` seconds
    after its start when ``beaten(1.0)``. Once it has one: after ``seconds`` of
    the searching process's user CPU time (the limit a search given grace
    keeps once it has found something), or after ``quiet`` seconds without a
    better solution. Either way at ``until`` (``time.monotonic()``). (None: never.)"""

    def __init__(
        self,
        parent: int,
        seconds: int | None,
        quiet: float | None,
        beaten: Callable[[float], bool] | None = None,
        outpaced: float = 0.0,
        until: float | None = None,
    ) -> None:
        self.parent, self.seconds, self.quiet = parent, seconds, quiet
        self.beaten, self.outpaced, self.until = beaten, outpaced, until
        self.cpu_start = _user_seconds(parent)
        self.begun = time.monotonic()
        self.last: float | None = None  # when the last solution came

    def watches(self) -> bool:
        """Whether there is anything to watch for."""
        watched = (self.seconds, self.quiet, self.beaten, self.until)
        return any(x is not None for x in watched)

    def seen(self) -> None:
        self.last = time.monotonic()

    def __call__(self) -> bool:
        if self.until is not None and time.monotonic() >= self.until:
            return True
        if self.last is None:
            if self.beaten is None:
                return False
            quiet = self.quiet is not None and time.monotonic() - self.begun >= self.quiet
            return self.beaten(self.outpaced) or (quiet and self.beaten(1.0))
        if self.quiet is not None and time.monotonic() - self.last >= self.quiet:
            return True
        if self.seconds is None:
            return False
        return _user_seconds(self.parent) - self.cpu_start >= self.seconds


def _watched(fd: int, parent: int, stop: Stop) -> Iterator[str]:
    """The lines toulbar2 prints on ``fd``; once ``stop()`` says so, send the
    ``parent`` SIGVTALRM: toulbar2's own time-out (its timer is ITIMER_VIRTUAL),
    so its search ends as if its time limit had come."""
    sent, rest = False, b""
    while True:
        if select.select([fd], [], [], 0.05)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            *done, rest = (rest + chunk).split(b"\n")
            for line in done:
                yield line.decode() + "\n"
        if not sent and stop():
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
