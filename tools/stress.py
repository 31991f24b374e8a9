"""Stress the worker protocol: many runs, deterministic and normal, idle and
beside a CPU burner, on the shared models, tiles and cuts of them.

Each instance gets ``--pairs`` deterministic pairs (one run on an idle
machine, one with a process burning a core beside it) and ``--normal``
normal runs. A deterministic run passes when it ran to its work budget (not
cut short), ended at most :data:`END_SLACK` seconds after its last stage
ended, its answer is valid, and its pair has the same fingerprint. A normal
run passes when it ended before its timeout with a valid answer. The
summary goes to stdout (Markdown); every run's progress log is kept with
``--logs DIR``.

    python tools/stress.py                         # the default set, 60 s runs
    python tools/stress.py N Nx2 N-cut2000 --timeout 30 --pairs 2
    python tools/stress.py --list                  # the instance names it knows

Names: a benchmark letter (``N``), a tile (``Nx2``: N laid twice in time,
about 11,000 variables after presolve: the size at which a merged solution
no longer fits a pipe's buffer), or a cut (``N-cut2000``: 2,000 connected
nodes of N, ``maxshard generate --from --nodes``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT.parent / "shared" / "benchmarks"
#: Where tiles and cuts are written once (git-ignored).
MADE = ROOT / "bench-results" / "stress"
DEFAULT = ["N", "S", "U", "Nx2", "Ux2", "N-cut2000", "S-cut2000", "U-cut4000"]
#: Seconds a deterministic run may take past the end of its last stage (its
#: answer checked and printed, its workers reaped) and still pass.
END_SLACK = 1.0


def instance(name: str) -> Path:
    """The file of ``name`` (see the module docstring), made on first use."""
    if re.fullmatch(r"[A-Z]", name):
        return BENCH / f"asplos-2025-iopddl-{name}.json.gz"
    tiled = re.fullmatch(r"([A-Z])x(\d+)", name)
    cut = re.fullmatch(r"([A-Z])-cut(\d+)", name)
    if not (tiled or cut):
        raise SystemExit(f"error: unknown instance name {name!r} (see --list)")
    path = MADE / f"{name}.json.gz"
    if not path.exists():
        MADE.mkdir(parents=True, exist_ok=True)
        source = instance((tiled or cut).group(1))
        how = ["--tile", tiled.group(2)] if tiled else ["--nodes", cut.group(2)]
        cmd = [sys.executable, "-m", "maxshard", "generate", str(path), "--from", str(source)]
        subprocess.run(cmd + how, check=True)
    return path


def run(path: Path, timeout: float, seed: int, deterministic: bool, burner: bool) -> dict:
    """One ``maxshard solve``; its progress lines stamped as they arrive."""
    burn = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if burner else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [sys.executable, "-m", "maxshard", "solve", str(path), str(timeout),
                   "--seed", str(seed), "--out", str(out)]  # fmt: skip
            if deterministic:
                cmd.append("--deterministic")
            start = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lines: list[tuple[float, str]] = []

            def read_progress() -> None:
                for line in proc.stderr:
                    lines.append((time.monotonic() - start, line.rstrip("\n")))

            reader = threading.Thread(target=read_progress)
            reader.start()
            stdout = proc.stdout.read()
            proc.wait()
            wall = time.monotonic() - start
            reader.join()
            result = json.loads(out.read_text()) if out.exists() else {}
    finally:
        if burn is not None:
            burn.kill()
            burn.wait()
    answer = stdout.strip().splitlines()[-1] if stdout.strip() else "[]"
    ended = [t for t, line in lines if re.match(r"# stage \d+/\d+ ended at work", line)]
    return {
        "wall": wall,
        "exit": proc.returncode,
        "answer": json.loads(answer),
        "result": result,
        "log": lines,
        "stages_ended": ended[-1] if ended else None,
    }


def valid(path: Path, answer: list[int]) -> bool:
    """Accepted by the evaluator, free of forbidden picks."""
    from maxshard.evaluate import evaluate
    from maxshard.reader import read_instance

    if not answer:
        return False
    try:
        return evaluate(read_instance(path), answer).clean
    except ValueError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="instances (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    parser.add_argument("--pairs", type=int, default=3, help="deterministic pairs per instance")
    parser.add_argument("--normal", type=int, default=1, help="normal runs per instance")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first pair")
    parser.add_argument("--logs", type=Path, help="keep each run's progress log here")
    parser.add_argument("--list", action="store_true", help="list the default instances")
    args = parser.parse_args()
    if args.list:
        print(" ".join(DEFAULT))
        return
    names = args.names or DEFAULT
    rows, failures = [], 0
    for name in names:
        path = instance(name)
        for pair in range(args.pairs):
            seed = args.seed + pair
            runs = [run(path, args.timeout, seed, True, burner) for burner in (False, True)]
            prints = {r["result"].get("fingerprint") for r in runs}
            for burner, r in zip((False, True), runs, strict=True):
                res = r["result"]
                slack = None if r["stages_ended"] is None else r["wall"] - r["stages_ended"]
                ok = (
                    r["exit"] == 0
                    and res.get("deterministic") is True
                    and slack is not None
                    and slack <= END_SLACK
                    and len(prints) == 1
                    and valid(path, r["answer"])
                )
                failures += not ok
                rows.append([name, "det" + (" +burner" if burner else ""), seed,
                             f"{r['wall']:.1f}", "-" if slack is None else f"{slack:.2f}",
                             f"{res.get('work_reached')}/{res.get('work')}",
                             res.get("cut_short") or "-", res.get("fingerprint"),
                             res.get("cost"), "ok" if ok else "FAIL"])  # fmt: skip
                _keep(args.logs, name, f"det-{seed}-{'burner' if burner else 'idle'}", r)
        for k in range(args.normal):
            seed = args.seed + k
            r = run(path, args.timeout, seed, False, burner=bool(k % 2))
            ok = r["exit"] == 0 and r["wall"] < args.timeout and valid(path, r["answer"])
            failures += not ok
            rows.append([name, "normal" + (" +burner" if k % 2 else ""), seed, f"{r['wall']:.1f}",
                         "-", "-", "-", "-", r["result"].get("cost"),
                         "ok" if ok else "FAIL"])  # fmt: skip
            _keep(args.logs, name, f"normal-{seed}", r)
        print(f"# {name} done ({failures} failures so far)", file=sys.stderr, flush=True)
    head = ["instance", "run", "seed", "wall (s)", "after its work (s)", "work", "cut short",
            "fingerprint", "cost", "verdict"]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    det = [r for r in rows if r[1].startswith("det")]
    print(f"\n{len(det)} deterministic runs, {len(rows) - len(det)} normal, "
          f"{failures} failed; timeout {args.timeout:g} s")  # fmt: skip
    sys.exit(1 if failures else 0)


def _keep(logs: Path | None, name: str, what: str, r: dict) -> None:
    if logs is None:
        return
    logs.mkdir(parents=True, exist_ok=True)
    text = "\n".join(f"{t:8.2f} {line}" for t, line in r["log"])
    (logs / f"{name}-{what}.log").write_text(text + f"\n{json.dumps(r['answer'])[:200]}\n")


if __name__ == "__main__":
    main()
