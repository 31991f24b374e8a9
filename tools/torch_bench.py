"""The PyTorch front-end's benchmark table (docs/torch.md): GPT-2 XL and
LLaMA-3 8B shapes at several depths on several meshes, built on the meta
device (no memory), traced, solved and compared with the baselines.

    python tools/torch_bench.py                       # the docs' table
    python tools/torch_bench.py --layers 2 --meshes 2x4 --timeout 5

Columns: instance size (nodes, strategies, edges, time points), seconds to
trace the step, to enumerate strategies and build the instance, maxshard's
seconds to its final answer (of ``--timeout``) and whether it proved it, the
plan's step time, and each baseline's step time relative to it.
"""

from __future__ import annotations

import argparse
import sys
import time

from maxshard.torch import plan
from maxshard.torch.examples import REAL_SHAPES as MODELS


def row(name: str, layers: int, mesh: str, timeout: float, memory: str | None) -> str:
    model, args = MODELS[name](layers=layers)
    started = time.perf_counter()
    p = plan(model, args, mesh=mesh, timeout=timeout, memory=memory)
    wall = time.perf_counter() - started
    s, sec = p.traced.stats(), p.traced.seconds
    final = p.result.cost
    found = next((t for t, c, _ in p.result.trace if c == final), p.result.time_s)
    proved = "yes" if p.result.lower_bound == final else "no"
    over = {True: "", False: " (over)"}
    ratio = " | ".join(f"{c.cost / p.cost:.2f}{over[c.fits]}" for c in p.baselines.values())
    return (
        f"| {name} | {layers} | {mesh} | {s['nodes']} | {s['strategies']} | {s['edges']} | "
        f"{s['time points']} | {sec['trace']:.1f} | {sec['strategies'] + sec['instance']:.1f} | "
        f"{found:.2f} | {proved} | {p.cost / 1e6:.2f} ms | {ratio} | {wall:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--layers", nargs="+", type=int, default=[2, 8, 32])
    parser.add_argument("--meshes", nargs="+", default=["2x4", "4x4", "2x2x2"])
    parser.add_argument("--timeout", type=float, default=10.0, help="solver seconds per row")
    parser.add_argument("--memory", help="device memory (default: no limit)")
    a = parser.parse_args()
    print(
        "| model | layers | mesh | nodes | strategies | edges | time points | trace s | "
        "instance s | answer at s | proved | step time | DP | FSDP | Megatron | wall s |"
    )
    print("|---" * 16 + "|")
    for name in a.models:
        for layers in a.layers:
            for mesh in a.meshes:
                print(row(name, layers, mesh, a.timeout, a.memory), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
