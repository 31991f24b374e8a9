"""maxshard against the frameworks' MIP on the framework suite (docs/torch.md,
*Head-to-head*): one table, from one run on this machine.

    python tools/head_to_head.py                    # the whole suite (about an hour)
    python tools/head_to_head.py --table            # the table of the runs already made
    python tools/head_to_head.py gpt2-xl-2-2x4 --mip-timeout 60

Runs, all through ``maxshard compare`` into one results file (a sweep resumes:
runs already there are skipped): maxshard's default plan at each of
``--budgets`` seconds and ``--deterministic`` at the last, one at a time (each
on two workers); HiGHS and CBC (the ``cbc`` outside backend) on the same
presolved instance for ``--mip-timeout`` seconds, two at a time.

The table gives per instance and solver the best cost, the bound, when the
best was first found and when it was proved (seconds of the run's clock,
from its start). Where a MIP proved an optimum, *reaches it at* is when
maxshard's run first had that cost, and the issue's verdict follows: reached
within its budget and in at most a tenth of the faster MIP's time to it.
Where no MIP proved one, the verdict compares maxshard's answer with the
MIPs' best.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from torch_suite import DEFAULT, make

from maxshard.workbench import Record, load_records, time_to_final

ROOT = Path(__file__).resolve().parent.parent
#: maxshard's budgets (seconds); the deterministic run gets the last
BUDGETS = [2.0, 5.0, 10.0]
MIPS = ["highs", "cbc"]


def compare(paths: list[Path], out: Path, backends: list[str], timeout: float, jobs: int) -> None:
    cmd = [sys.executable, "-m", "maxshard", "compare", *map(str, paths), "--out", str(out),
           "--timeout", str(timeout), "--jobs", str(jobs), "--no-figures"]  # fmt: skip
    for b in backends:
        cmd += ["-b", b]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def reached(record: Record, cost: int) -> float | None:
    """When ``record``'s run first had a solution costing at most ``cost``."""
    return next(
        (float(t) for t, c, _ in record.get("trace", []) if c is not None and c <= cost), None
    )


def label(record: Record) -> str:
    if record["backend"] in MIPS:
        return {"highs": "HiGHS", "cbc": "CBC"}[record["backend"]]
    det = " --deterministic" if record["backend"] == "det" else ""
    return f"maxshard {record['timeout']:g} s{det}"


def num(value: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if value is None else fmt.format(value)


def table(records: list[Record]) -> str:
    columns = ["instance", "solver", "cost", "bound", "best at (s)", "proved at (s)",
               "reaches MIP optimum at (s)"]  # fmt: skip
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    verdicts = []
    for name in sorted({r["instance"] for r in records}):
        runs = [r for r in records if r["instance"] == name]
        mips = [r for r in runs if r["backend"] in MIPS]
        ours = sorted((r for r in runs if r["backend"] not in MIPS),
                      key=lambda r: (r["backend"] == "det", r["timeout"]))  # fmt: skip
        proved = [r for r in mips if r.get("proved_at") is not None]
        optimum = min((r["cost"] for r in proved), default=None)
        first = name
        for r in [*ours, *mips]:
            ours_and_proved = optimum is not None and r["backend"] not in MIPS
            at = reached(r, optimum) if ours_and_proved else None
            lines.append(
                f"| {first} | {label(r)} | {num(r.get('cost'))} | {num(r.get('bound'))} | "
                f"{num(time_to_final(r), '{:.2f}')} | {num(r.get('proved_at'), '{:.2f}')} | "
                f"{num(at, '{:.2f}')} |"
            )
            first = ""
        verdicts.append(verdict(name, ours, mips, optimum))
    return "\n".join(lines + [""] + verdicts)


def verdict(name: str, ours: list[Record], mips: list[Record], optimum: int | None) -> str:
    """The issue's test for one instance, on maxshard's longest default run."""
    runs = [r for r in ours if r["backend"] == "default" and r.get("cost") is not None]
    if not runs:
        return f"- {name}: maxshard has no answer"
    ten = max(runs, key=lambda r: r["timeout"])
    if optimum is None:
        best = min((r["cost"] for r in mips if r.get("cost") is not None), default=None)
        if best is None:
            return f"- {name}: no MIP answered; maxshard {ten['cost']:,}"
        met = "met" if ten["cost"] <= best else "NOT met"
        return f"- {name}: no MIP proof; maxshard {ten['cost']:,}, MIPs' best {best:,}: {met}"
    mip_time = min(
        r["proved_at"] for r in mips if r.get("proved_at") is not None and r["cost"] == optimum
    )
    found = [reached(r, optimum) for r in mips if r.get("cost") == optimum]
    mip_best = min((t for t in found if t is not None), default=mip_time)
    at = reached(ten, optimum)
    ok = at is not None and at <= ten["timeout"] and at <= mip_best / 10
    proof = ten.get("proved_at")
    return (
        f"- {name}: optimum {optimum:,} (a MIP found it at {mip_best:.2f} s, "
        f"proved it at {mip_time:.2f} s); "
        f"maxshard {ten['timeout']:g} s reaches it at {num(at, '{:.2f}')} s: "
        f"{'met' if ok else 'NOT met'}; proves it at {num(proof, '{:.2f}')} s "
        f"({'met' if proof is not None and proof <= mip_time else 'NOT met'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", default=DEFAULT, help="suite instances (torch_suite.py)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "head-to-head")
    parser.add_argument("--budgets", type=float, nargs="+", default=BUDGETS)
    parser.add_argument("--mip-timeout", type=float, default=600.0)
    parser.add_argument("--table", action="store_true", help="only print the table of runs made")
    a = parser.parse_args()
    results = a.out / "results.jsonl"
    if not a.table:
        paths = [make(name) for name in a.names]
        for seconds in a.budgets:
            compare(paths, a.out, ["default"], seconds, jobs=1)
        compare(paths, a.out, ["det"], a.budgets[-1], jobs=1)
        compare(paths, a.out, MIPS, a.mip_timeout, jobs=2)
    print(table(load_records(results)))


if __name__ == "__main__":
    main()
