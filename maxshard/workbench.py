"""Sweeps for comparing solvers: instances x backends x seeds, each run traced.

A *run* is one backend alone on one instance with one seed for a time limit:
read, presolve, then the backend in a worker process exactly as in a solve
(every solution re-costed by the evaluator). Its *record* (a dict, one JSON
line in ``results.jsonl``) holds the final cost, bound and status and the
anytime *trace*: ``[seconds, best cost, best bound]`` at every improvement,
seconds counted from the backend's start (presolve is recorded apart).

Runs go to the local cores (one process each) or, given a Ray address, to a
Ray cluster as tasks (the instance travels as bytes through Ray's object
store, so its nodes need no shared files). A sweep skips the runs already in
its results file, so an interrupted one resumes where it stopped.

From the records, :func:`summary` gives per instance and backend: best cost,
runs proved optimal, time to best, time to proof, final gap and the *primal
integral*: the integral over the run of the primal gap ``(c(t) - c*) /
max(c(t), c*)`` (1 before the first solution), ``c*`` the best cost any run
found on the instance, in seconds (Berthold 2013): small is good and fast.
:func:`totals` sums the same per backend over the whole sweep.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

Record = dict


@dataclass(frozen=True)
class Trial:
    """One run of a sweep: a backend (or plan) on an instance at a seed."""

    instance: str  # a name, unique within the sweep
    path: str
    backend: str
    seed: int
    timeout: float

    @property
    def key(self) -> tuple[str, str, int, float]:
        return (self.instance, self.backend, self.seed, self.timeout)


def instance_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def plan_runs(
    paths: Iterable[Path], backends: list[str], seeds: int, timeout: float
) -> list[Trial]:
    """Every instance x backend x seed, instances named after their files."""
    runs = []
    for path in paths:
        for backend in backends:
            for seed in range(seeds):
                runs.append(Trial(instance_name(path), str(path), backend, seed, timeout))
    return runs


#: Names a sweep may give instead of a backend: maxshard's own plans (the default
#: one, --prove's, or the default one run ``--deterministic``), or ``plan:FILE``
#: (a plan file), each on :data:`PLAN_WORKERS` workers (give the sweep that many
#: cores per run: ``--jobs 1`` on two cores)
PLANS = ("default", "prove", "det")
PLAN_WORKERS = 2


def is_plan(name: str) -> bool:
    return name in PLANS or plan_file(name) is not None


def plan_file(name: str) -> str | None:
    """The file of a ``plan:FILE`` name, else None."""
    return name.removeprefix("plan:") if name.startswith("plan:") else None


def check_backends(names: Iterable[str]) -> None:
    """Raise (BackendError or PlanError, both ValueErrors) on the first name that
    is neither a backend nor a plan that can be read, before any run."""
    from .orchestrate import load
    from .registry import check_names

    for name in names:
        if (file := plan_file(name)) is not None:
            load(file)
    check_names([n for n in names if not is_plan(n)])


def run_one(run: Trial, data: bytes | None = None) -> Record:
    """Solve ``run`` (from ``data`` if given, else its file); never raises."""
    from .orchestrate import Run as Solve
    from .orchestrate import load as load_plan
    from .orchestrate.options import options_for
    from .reader import parse_instance, read_bytes
    from .reduce import Infeasible, reduce

    record: Record = {
        "instance": run.instance,
        "backend": run.backend,
        "seed": run.seed,
        "timeout": run.timeout,
    }
    start = time.monotonic()
    try:
        inst = parse_instance(data if data is not None else read_bytes(run.path), run.instance)
        record["nodes"] = inst.n
        try:
            model = reduce(inst)
        except Infeasible:
            record.update(status="infeasible", cost=None, bound=None, trace=[], proved_at=0.0)
            return record
        record["presolve_s"] = round(time.monotonic() - start, 3)
        record["variables"] = model.nv
        if is_plan(run.backend):  # the whole plan, its time from before presolve (as `solve`)
            file = plan_file(run.backend)
            plan = load_plan(file) if file is not None else None
            options = options_for(run.timeout, plan=plan, prove=run.backend == "prove",
                                  seed=run.seed, workers=PLAN_WORKERS,
                                  deterministic=run.backend == "det")  # fmt: skip
            solve = Solve(options, lambda _message: None, start)
        else:  # one backend alone, its time from after presolve
            options = options_for(run.timeout, backends=[run.backend], seed=run.seed, workers=1,
                                  starts=False)  # fmt: skip
            solve = Solve(options, lambda _message: None)
        try:
            solve.solve(inst, solve.start + run.timeout, model)
        finally:
            solve.stop()
        result = solve.result()
        record.update(
            status=result.status,
            outcome=result.outcome.get(run.backend, "-")
            if not is_plan(run.backend)
            else result.status,
            cost=result.cost,
            forbidden=result.forbidden_picks,
            bound=result.lower_bound,
            proved_at=result.proved_at,
            trace=[list(t) for t in result.trace],
            solution=result.solution,
        )
        if result.deterministic is not None:  # its trace is in work units
            record.update(deterministic=result.deterministic, cut_short=result.cut_short,
                          fingerprint=result.fingerprint)  # fmt: skip
    except Exception as exc:  # a sweep records a failed run and goes on
        record.update(status="error", error=f"{type(exc).__name__}: {exc}", trace=[])
    record["wall_s"] = round(time.monotonic() - start, 3)
    return record


def load_records(path: Path) -> list[Record]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short when a sweep was killed
    return records


def key_of(record: Record) -> tuple[str, str, int, float]:
    return (record["instance"], record["backend"], record["seed"], record["timeout"])


def sweep(
    runs: list[Trial],
    results: Path,
    jobs: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int, int, float], None] | None = None,
) -> list[Record]:
    """Run what ``results`` (JSON lines) does not hold yet, appending each record as
    it completes; return all records of ``runs``. ``progress(done, running, left,
    elapsed)`` is called as runs start and end."""
    results.parent.mkdir(parents=True, exist_ok=True)
    have = {key_of(r): r for r in load_records(results)}
    todo = [r for r in runs if r.key not in have]
    start = time.monotonic()
    done = 0

    def finished(record: Record) -> None:
        nonlocal done
        done += 1
        have[key_of(record)] = record
        with results.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def tick(running: int) -> None:
        if progress:
            progress(done, running, len(todo) - done - running, time.monotonic() - start)

    if todo:
        if ray_address is not None:
            _sweep_ray(todo, ray_address, finished, tick)
        else:
            from .orchestrate import available_cores

            _sweep_local(todo, jobs or available_cores(), finished, tick)
    return [have[r.key] for r in runs if r.key in have]


def _sweep_local(todo: list[Trial], jobs: int, finished, tick) -> None:
    import multiprocessing as mp

    queue = list(todo)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork")) as pool:
        running = {}
        while queue or running:
            while queue and len(running) < jobs:
                run = queue.pop(0)
                running[pool.submit(run_one, run)] = run
            tick(len(running))
            ready, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in ready:
                run = running.pop(future)
                try:
                    finished(future.result())
                except Exception as exc:  # the pool process itself died
                    finished({**_blank(run), "status": "error", "error": repr(exc)})
        tick(0)


def _sweep_ray(todo: list[Trial], address: str, finished, tick) -> None:
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs Ray: pip install 'maxshard[ray]'") from None
    if not ray.is_initialized():
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(run_one)
    data = {path: ray.put(Path(path).read_bytes()) for path in {r.path for r in todo}}
    pending = {remote.remote(run, data[run.path]): run for run in todo}
    while pending:
        # Ray queues every task at once; at most one per cluster CPU runs
        slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        tick(min(len(pending), slots))
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            run = pending.pop(ref)
            try:
                finished(ray.get(ref))
            except Exception as exc:  # the task or its node failed
                finished({**_blank(run), "status": "error", "error": repr(exc)})
    tick(0)


def _blank(run: Trial) -> Record:
    return {
        "instance": run.instance,
        "backend": run.backend,
        "seed": run.seed,
        "timeout": run.timeout,
        "cost": None,
        "bound": None,
        "trace": [],
    }


class ProgressBar:
    """``runs done, running, left, elapsed`` redrawn on one line of a terminal
    (a plain line every ten runs elsewhere)."""

    def __init__(self, total: int, stream=sys.stderr) -> None:
        self.total, self.stream = total, stream
        self.live = stream.isatty()
        self.last_done = -1

    def __call__(self, done: int, running: int, left: int, elapsed: float) -> None:
        width = 30
        filled = int(width * done / max(1, done + running + left))
        bar = "#" * filled + "." * (width - filled)
        mins, secs = divmod(int(elapsed), 60)
        line = f"[{bar}] {done} done, {running} running, {left} left, {mins}m{secs:02d}s"
        if self.live:
            self.stream.write("\r\x1b[K" + line)
            self.stream.flush()
        elif done != self.last_done and (done % 10 == 0 or not (running or left)):
            self.stream.write(line + "\n")
        self.last_done = done

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")


# --- measures ---------------------------------------------------------------


def reference_costs(records: list[Record]) -> dict[str, int]:
    """Per instance, the best cost any run found (the ``c*`` of the gaps)."""
    ref: dict[str, int] = {}
    for r in records:
        if r.get("cost") is not None and not r.get("forbidden"):
            ref[r["instance"]] = min(ref.get(r["instance"], r["cost"]), r["cost"])
    return ref


def primal_gap(cost: int | None, reference: int | None) -> float:
    if cost is None or reference is None:
        return 1.0
    if cost == reference:
        return 0.0
    return abs(cost - reference) / max(abs(cost), abs(reference))


def primal_integral(record: Record, reference: int | None) -> float:
    """The integral of the primal gap over the run, in seconds."""
    horizon = float(record["timeout"])
    total, t_prev, gap = 0.0, 0.0, 1.0
    for t, cost, _bound in record.get("trace", []):
        t = min(float(t), horizon)
        total += gap * (t - t_prev)
        t_prev, gap = t, primal_gap(cost, reference)
    return total + gap * max(0.0, horizon - t_prev)


def time_to_final(record: Record) -> float | None:
    """When the run's final cost was first reached."""
    final = record.get("cost")
    if final is None:
        return None
    return next((float(t) for t, cost, _ in record.get("trace", []) if cost == final), None)


def final_gap(record: Record) -> float | None:
    cost, bound = record.get("cost"), record.get("bound")
    if cost is None or bound is None:
        return None
    return 0.0 if cost == 0 else max(0.0, (cost - bound) / cost)


def summary(records: list[Record]) -> list[dict]:
    """One row per instance and backend, over its seeds (see the module docstring)."""
    ref = reference_costs(records)
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r["instance"], r["backend"]), []).append(r)
    rows = []
    for (instance, backend), runs in sorted(groups.items()):
        costs = [r["cost"] for r in runs if r.get("cost") is not None]
        proved = [r for r in runs if r.get("status") in ("optimal", "infeasible")]
        gaps = [g for g in map(final_gap, runs) if g is not None]
        to_best = [t for t in map(time_to_final, runs) if t is not None]
        rows.append(
            {
                "instance": instance,
                "backend": backend,
                "runs": len(runs),
                "best_cost": min(costs) if costs else None,
                "proved": f"{len(proved)}/{len(runs)}",
                "time_to_best_s": round(statistics.median(to_best), 2) if to_best else None,
                "time_to_proof_s": (
                    round(statistics.median(r["proved_at"] for r in proved), 2) if proved else None
                ),
                "final_gap": round(statistics.median(gaps), 5) if gaps else None,
                "primal_integral_s": round(
                    statistics.mean(primal_integral(r, ref.get(instance)) for r in runs), 2
                ),
                "errors": sum(r.get("status") == "error" for r in runs),
            }
        )
    return rows


def totals(records: list[Record]) -> list[dict]:
    """One row per backend over the whole sweep: instances where it found an
    answer, where it found the best cost of any run, where it proved optimality
    (runs proved of runs made), and its mean primal integral."""
    ref = reference_costs(records)
    rows = []
    for b in sorted({r["backend"] for r in records}):
        runs = [r for r in records if r["backend"] == b]
        by_instance: dict[str, list[Record]] = {}
        for r in runs:
            by_instance.setdefault(r["instance"], []).append(r)
        costs = {
            i: [r["cost"] for r in rs if r.get("cost") is not None] for i, rs in by_instance.items()
        }
        rows.append(
            {
                "backend": b,
                "instances": len(by_instance),
                "answered": sum(bool(c) for c in costs.values()),
                "best_found": sum(bool(c) and min(c) == ref.get(i) for i, c in costs.items()),
                "proved_runs": f"{sum(r.get('status') == 'optimal' for r in runs)}/{len(runs)}",
                "mean_primal_integral_s": round(
                    statistics.mean(primal_integral(r, ref.get(r["instance"])) for r in runs), 2
                ),
            }
        )
    return rows


def performance_profile(records: list[Record], taus: list[float]) -> dict[str, list[float]]:
    """Per backend, the share of (instance, seed) pairs it solved within a factor
    ``tau`` of the best cost any backend reached on that pair's instance."""
    ref = reference_costs(records)
    pairs = {(r["instance"], r["seed"]) for r in records}
    backends = sorted({r["backend"] for r in records})
    cost = {(r["instance"], r["seed"], r["backend"]): r.get("cost") for r in records}
    out = {}
    for b in backends:
        ratios = []
        for instance, seed in pairs:
            c, best = cost.get((instance, seed, b)), ref.get(instance)
            if c is None or best is None:
                ratios.append(float("inf"))
            else:
                ratios.append(1.0 if c == best else c / best if best > 0 else float("inf"))
        out[b] = [sum(r <= tau for r in ratios) / max(1, len(ratios)) for tau in taus]
    return out


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no runs)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join("-" if row[c] is None else str(row[c]) for c in cols) + " |")
    return "\n".join(lines)
