"""The standard small suite for comparing solvers: cuts of the real benchmarks.

Random graphs are unlike the contest's, and at sizes where exact solvers can
finish they rarely have memory as tight or costs as structured. So the suite
cuts connected regions from the 8 shared benchmarks (``generate --from``,
memory as tight as the source's): four sizes from 100 to 2,000 nodes from each
large one, three from G and V (816 nodes in all), plus G and V whole: 32
instances. The list is fixed here, so ``maxshard suite DIR`` makes the same
files on any machine (the cut seeds are part of it).
"""

from __future__ import annotations

from pathlib import Path

#: (benchmark letter, nodes or None for the whole instance, cut seed)
SUITE: list[tuple[str, int | None, int]] = [
    *[(b, n, 1) for b in "AMNPSU" for n in (100, 300, 1000, 2000)],
    *[(b, n, 1) for b in "GV" for n in (200, 400, 600)],
    ("G", None, 0),
    ("V", None, 0),
]


def suite_name(letter: str, nodes: int | None, seed: int) -> str:
    return f"{letter}-whole" if nodes is None else f"{letter}-{nodes}-s{seed}"


def make_suite(bench_dir: Path, out: Path, log=print) -> list[Path]:
    """Write the suite's instances to ``out`` (gzipped JSON); returns their paths.
    Files already there are kept (the cuts are deterministic)."""
    from .generate import cut, to_problem, write_problem
    from .reader import read_instance

    out.mkdir(parents=True, exist_ok=True)
    paths, sources = [], {}
    for letter, nodes, seed in SUITE:
        name = suite_name(letter, nodes, seed)
        path = out / f"{name}.json.gz"
        paths.append(path)
        if path.exists():
            continue
        if letter not in sources:
            sources[letter] = read_instance(bench_dir / f"asplos-2025-iopddl-{letter}.json.gz")
        inst = sources[letter] if nodes is None else cut(sources[letter], nodes, seed)
        write_problem(to_problem(inst, name), path)
        log(f"# wrote {path} ({inst.n} nodes, {inst.m} edges)")
    return paths
