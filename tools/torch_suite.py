"""Framework instances: GPT-2 XL and LLaMA-3 8B shapes traced with the
PyTorch front-end, written as contest instances for `maxshard compare` and
`tools/bench.py`-style head-to-heads (docs/torch.md, *Head-to-head*).

    python tools/torch_suite.py                     # the default suite
    python tools/torch_suite.py --list
    maxshard compare 'bench-results/torch/*.json.gz' -b default -b highs --timeout 10 --jobs 1

Names: ``MODEL-LAYERS-MESH[-tight]``, e.g. ``llama3-8b-8-2x4-tight``. A
tight instance's memory limit is 80% of the data-parallel baseline's peak
(so that baseline does not fit). Instances are made once, under
``bench-results/torch/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MADE = ROOT / "bench-results" / "torch"
#: The default suite: every shape and mesh once, each depth, loose and tight.
DEFAULT = [
    "gpt2-xl-2-2x4", "gpt2-xl-8-4x4", "gpt2-xl-8-4x4-tight", "gpt2-xl-2-2x2x2-tight",
    "llama3-8b-2-2x2x2", "llama3-8b-8-2x4-tight", "llama3-8b-8-4x4", "llama3-8b-32-8x8",
]  # fmt: skip
#: The tight limit's share of the data-parallel baseline's peak.
TIGHT = 0.8


def make(name: str) -> Path:
    """Write instance ``name`` (see the module docstring) unless it exists."""
    from maxshard.evaluate import evaluate
    from maxshard.torch import trace
    from maxshard.torch.baselines import baselines
    from maxshard.torch.examples import REAL_SHAPES

    found = re.fullmatch(r"(gpt2-xl|llama3-8b)-(\d+)-([\dx]+)(-tight)?", name)
    if not found:
        raise SystemExit(f"error: {name!r} is not MODEL-LAYERS-MESH[-tight] (see --list)")
    path = MADE / f"{name}.json.gz"
    if path.exists():
        return path
    factory = REAL_SHAPES[found.group(1)]
    model, args = factory(layers=int(found.group(2)))
    traced = trace(model, args, mesh=found.group(3))
    if found.group(4):
        dp = baselines(traced, model)["data parallel"]
        limit = int(TIGHT * evaluate(traced.instance, dp).peak)
        traced = trace(model, args, mesh=found.group(3), memory=limit)
    MADE.mkdir(parents=True, exist_ok=True)
    traced.write(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=DEFAULT)
    parser.add_argument("--list", action="store_true", help="print the default suite")
    a = parser.parse_args()
    if a.list:
        print("\n".join(DEFAULT))
        return
    for name in a.names:
        print(make(name), flush=True)


if __name__ == "__main__":
    main()
