"""The standard suite for comparing solvers: cuts of the real benchmarks.

Random graphs are unlike the contest's, and at sizes where exact solvers can
finish they rarely have memory as tight or costs as structured. So the suite
cuts connected regions from the 8 shared benchmarks (``generate --from``,
memory as tight as the source's): four or five sizes from 100 to 4,000 nodes
from each large one, three from G and V (816 nodes in all), plus G and V
whole: 36 instances. Every cut leaves work: its seed is the smallest from 1
whose presolved cut keeps variables and a time point where memory can bind
(with seed 1 for all, presolve alone solved A-100 and the four cuts of P).
The 4,000-node cuts are where exact solvers stop proving. The list is fixed
here, so ``maxshard suite DIR`` makes the same files on any machine.
"""

from __future__ import annotations

from pathlib import Path

#: (benchmark letter, nodes or None for the whole instance, cut seed)
SUITE: list[tuple[str, int | None, int]] = [
    ("A", 100, 6), ("A", 300, 1), ("A", 1000, 1), ("A", 2000, 1),
    ("M", 100, 1), ("M", 300, 4), ("M", 1000, 1), ("M", 2000, 1), ("M", 4000, 1),
    ("N", 100, 3), ("N", 300, 1), ("N", 1000, 1), ("N", 2000, 1), ("N", 4000, 1),
    ("P", 100, 21), ("P", 300, 27), ("P", 1000, 7), ("P", 2000, 5),
    ("S", 100, 2), ("S", 300, 1), ("S", 1000, 1), ("S", 2000, 1), ("S", 4000, 1),
    ("U", 100, 1), ("U", 300, 1), ("U", 1000, 1), ("U", 2000, 1), ("U", 4000, 1),
    ("G", 200, 2), ("G", 400, 1), ("G", 600, 1),
    ("V", 200, 1), ("V", 400, 1), ("V", 600, 1),
    ("G", None, 0),
    ("V", None, 0),
]  # fmt: skip


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
