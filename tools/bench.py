"""Benchmark maxshard on the shared contest instances.

Runs ``maxshard solve`` on each benchmark with its contest time limit from
``best_known.csv`` (times ``--scale``), checks every answer with the exact
evaluator, and writes a Markdown table (and optionally CSV): cost, score
(best_known_cost / cost, >= 1.0 matches the contest's best), our in-run lower
bound and gap, the published bound's gap and when our bound first reached
the published one (``met_published``, seconds), wall time and peak RSS, and the
curve of the run: when its answer first reached the contest's best
(``time_to_best``, seconds from the start) and its score at 10%, 25% and 50%
of the budget (``score_10`` ..., read from the run's trace).

    python tools/bench.py                       # all benchmarks and tiled rows, full limits
    python tools/bench.py --scale 0.25 A G      # a quarter of the limit, two instances
    python tools/bench.py Nx2 --seed 1          # N tiled twice (maxshard generate --tile)
    python tools/bench.py N --logs runs/        # keep each run's progress log and answer
    python tools/bench.py -b local --no-presolve  # one backend, on the raw instance
    python tools/bench.py --prove               # the proving plan (maxshard solve --prove)
    python tools/bench.py --plan mine.toml      # a plan file (maxshard solve --plan)
    python tools/bench.py --deterministic       # work-counted runs (maxshard solve --deterministic)

A tiled row ``Nx2`` is benchmark N laid twice in time, joined by zero-cost
edges (about 80,000 nodes): its reference is twice N's best known cost, its
limit :data:`TILED_LIMIT` seconds. It stands for the contest's largest
members of the N/U family, which are not among the shared benchmarks.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT.parent / "shared" / "benchmarks"
#: Where tiled instances are written once (git-ignored).
TILED_DIR = ROOT / "bench-results" / "tiled"
TILED_LIMIT = 300.0
DEFAULT_TILED = ["Nx2", "Ux2"]


def run_one(
    path: Path,
    timeout: float,
    seed: int,
    backends: list[str],
    presolve: bool,
    quiet: bool = True,
    prove: bool = False,
    plan: Path | None = None,
    deterministic: bool = False,
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "maxshard", "solve", str(path), str(timeout)]
        cmd += ["--out", str(out), "--seed", str(seed)] + (["-q"] if quiet else [])
        for b in backends:
            cmd += ["--backend", b]
        if not presolve:
            cmd.append("--no-presolve")
        if prove:
            cmd.append("--prove")
        if plan is not None:
            cmd += ["--plan", str(plan)]
        if deterministic:
            cmd.append("--deterministic")
        start = time.monotonic()
        # stderr to a file: a long progress log would fill a pipe read after stdout
        with (Path(tmp) / "stderr").open("w+b") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
            stdout = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.monotonic() - start
            err.seek(0)
            stderr = err.read()
        result = json.loads(out.read_text()) if out.exists() else {}
    lines = stdout.decode().strip().splitlines()
    return {
        "answer": json.loads(lines[-1]) if lines else None,
        "exit": os.waitstatus_to_exitcode(status),
        "stderr": stderr.decode(),
        "wall": wall,
        # the solver's own peak (the fork-time RSS of this process would skew wait4's)
        "rss_mb": result.get("peak_rss_mb") or usage.ru_maxrss / 1024,
        "lower_bound": result.get("lower_bound"),
        "method": result.get("method"),
        "trace": result.get("trace") or [],
        "deterministic": result.get("deterministic"),
        "fingerprint": result.get("fingerprint"),
    }


#: Points of the budget (percent) at which the table reads the score off the trace.
CURVE = (10, 25, 50)


def time_to_best(trace: list, best_known: int) -> float | None:
    """Seconds (from the process start) until the answer first cost at most the
    contest's best, or None if it never did."""
    return next((t for t, cost, _ in trace if cost is not None and cost <= best_known), None)


def score_at(trace: list, best_known: int, seconds: float) -> float | None:
    """The score of the best answer the run had ``seconds`` after its start (None: none yet)."""
    costs = [cost for t, cost, _ in trace if t <= seconds and cost is not None]
    return round(best_known / costs[-1], 4) if costs else None


def check(path: Path, answer: list[int]) -> dict[str, int | bool]:
    """Evaluate an answer with ``maxshard evaluate`` in a child process: this process
    stays small, since Linux carries its RSS into every solver it spawns (ru_maxrss
    survives exec)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(json.dumps(answer))
        f.flush()
        out = subprocess.run(
            [sys.executable, "-m", "maxshard", "evaluate", str(path), f.name],
            capture_output=True,
            text=True,
        ).stdout
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    return {
        "cost": int(fields["cost"]),
        "feasible": fields["feasible"] == "yes",
        "forbidden": int(fields["forbidden picks"]),
    }


def warm_up() -> tuple[float, float]:
    """Seconds to compile the numba kernels from scratch (in a throwaway cache:
    what the first solve after an install would pay) and to load them from
    the real cache, which this leaves warm for the timed runs."""

    def timed(env: dict) -> float:
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "maxshard", "warmup"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return time.monotonic() - start

    with tempfile.TemporaryDirectory() as tmp:
        cold = timed({**os.environ, "NUMBA_CACHE_DIR": tmp})
    timed(dict(os.environ))  # compiles into the real cache if it is cold
    return cold, timed(dict(os.environ))


def tiled_rows(names: list[str], rows: list[dict], bench_dir: Path) -> list[dict]:
    """Rows for names like ``Nx2``: the tiled file (made on first use), twice the
    reference cost and bound, the tiled time limit."""
    out = []
    for name in names:
        letter, copies = name.split("x")
        source = next(r for r in rows if r["benchmark"].endswith("-" + letter))
        path = TILED_DIR / f"{source['benchmark']}-x{copies}.json.gz"
        if not path.exists():
            TILED_DIR.mkdir(parents=True, exist_ok=True)
            src = bench_dir / f"{source['benchmark']}.json.gz"
            cmd = [sys.executable, "-m", "maxshard", "generate", str(path), "--from", str(src)]
            subprocess.run(cmd + ["--tile", copies], check=True)
        k = int(copies)
        out.append(
            {
                "benchmark": name,
                "path": path,
                "timeout_s": TILED_LIMIT,
                "best_known_cost": k * int(source["best_known_cost"]),
                "lower_bound": k * int(source["lower_bound"]),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "names",
        nargs="*",
        help="benchmark letters or names, or tiled rows like Nx2 (default: all, Nx2, Ux2)",
    )
    ap.add_argument("--scale", type=float, default=1.0, help="multiply each time limit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", action="append", default=[], help="passed to maxshard solve")
    ap.add_argument(
        "--no-presolve", action="store_true", help="solve without presolve (for comparisons)"
    )
    ap.add_argument("--prove", action="store_true", help="run maxshard solve --prove")
    ap.add_argument("--plan", type=Path, help="run maxshard solve --plan PLAN")
    ap.add_argument(
        "--deterministic", action="store_true", help="run maxshard solve --deterministic"
    )
    ap.add_argument("--bench-dir", type=Path, default=BENCH)
    ap.add_argument("--out", type=Path, help="also write the rows as CSV here")
    ap.add_argument(
        "--logs",
        type=Path,
        help="keep each run's progress log and answer here (NAME-seedK-scaleS.log, .json)",
    )
    args = ap.parse_args()

    known = list(csv.DictReader((args.bench_dir / "best_known.csv").open()))
    for r in known:
        r["path"] = args.bench_dir / f"{r['benchmark']}.json.gz"
    names = args.names or [r["benchmark"] for r in known] + DEFAULT_TILED
    rows = [
        r
        for r in known
        if any(r["benchmark"].endswith("-" + n) or r["benchmark"] == n for n in names)
    ]
    tiled = [n for n in names if re.fullmatch(r"[A-Z]x\d+", n)]
    rows += tiled_rows(tiled, known, args.bench_dir)
    cold, warm = warm_up()
    table = []
    for r in rows:
        path = r["path"]
        limit = float(r["timeout_s"]) * args.scale
        run = run_one(
            path,
            limit,
            args.seed,
            args.backend,
            not args.no_presolve,
            quiet=not args.logs,
            prove=args.prove,
            plan=args.plan,
            deterministic=args.deterministic,
        )
        name = r["benchmark"].rsplit("-", 1)[-1]
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            log = args.logs / f"{name}-seed{args.seed}-scale{args.scale:g}.log"
            log.write_text(run["stderr"])
            log.with_suffix(".json").write_text(json.dumps(run["answer"]))
        row = {
            "benchmark": name,
            "limit_s": limit,
            "time_s": round(run["wall"], 1),
            "rss_mb": round(run["rss_mb"]),
        }
        if not run["answer"]:
            row.update(cost=None, valid="no answer")
        else:
            ev = check(path, run["answer"])
            best, published = int(r["best_known_cost"]), int(r["lower_bound"])
            lb = run["lower_bound"]
            row.update(
                cost=ev["cost"],
                valid="OVER LIMIT"
                if not ev["feasible"]
                else ("forbidden picks" if ev["forbidden"] else "yes"),
                score=round(best / ev["cost"], 4),
                bound=lb,
                gap_bound=None if lb is None else f"{100 * (ev['cost'] - lb) / ev['cost']:.2f}%",
                gap_published=f"{100 * (ev['cost'] - published) / ev['cost']:.2f}%",
                # when the in-run bound first reached the published one (seconds)
                met_published=next(
                    (t for t, _, b in run["trace"] if b is not None and b >= published), None
                ),
                method=run["method"],
                time_to_best=time_to_best(run["trace"], best),
                **{f"score_{k}": score_at(run["trace"], best, k / 100 * limit) for k in CURVE},
            )
        row["late"] = "LATE" if run["wall"] > limit else ""
        if args.deterministic:  # its trace is in work units: no curve in seconds
            row.update(deterministic=run["deterministic"], fingerprint=run["fingerprint"])
            row.update({k: None for k in ("met_published", "time_to_best")})
            row.update({f"score_{k}": None for k in CURVE})
        table.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    cols = [
        "benchmark",
        "limit_s",
        "cost",
        "score",
        "bound",
        "gap_bound",
        "gap_published",
        "met_published",
        "time_to_best",
        *(f"score_{k}" for k in CURVE),
        "time_s",
        "rss_mb",
        "valid",
        "late",
    ] + (["deterministic", "fingerprint"] if args.deterministic else [])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in table:
        print("| " + " | ".join("" if row.get(c) is None else str(row.get(c)) for c in cols) + " |")
    scores = [row["score"] for row in table if row.get("score")]
    if scores:
        print(f"\nscore sum {sum(scores):.4f} over {len(scores)} benchmarks (scale {args.scale})")
    print(
        f"\nnumba kernels: {cold:.1f}s to compile from scratch (once per install, "
        f"`maxshard warmup`), {warm:.1f}s to load once cached (in every time_s above)"
    )
    if args.out:
        with args.out.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols + ["method"], extrasaction="ignore")
            w.writeheader()
            w.writerows(table)


if __name__ == "__main__":
    main()
