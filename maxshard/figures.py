"""Figures of a sweep (matplotlib, PNG): anytime traces and a performance profile.

* ``traces/<instance>.png``: cost and lower bound over time, one colour per
  backend (solid: the best cost so far, dashed: the best bound so far), both
  divided by the best cost any run found on the instance, log axes (so costs
  far off and bounds close below stay on one readable chart), every seed drawn
  (the first thick, the others thin);
* ``profile.png``: the performance profile over the whole sweep: for each
  backend, the share of (instance, seed) pairs on which its cost is within a
  factor tau of the best cost any backend reached there.

matplotlib is an optional extra (``pip install 'maxshard[plot]'``).
"""

from __future__ import annotations

from pathlib import Path

from .workbench import Record, performance_profile, reference_costs


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("figures need matplotlib: pip install 'maxshard[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _steps(trace: list, horizon: float, column: int) -> tuple[list[float], list[float]]:
    """A step curve of one trace column (1: cost, 2: bound) up to ``horizon``."""
    xs, ys = [], []
    for row in trace:
        t, value = max(float(row[0]), 1e-3), row[column]
        if value is None:
            continue
        if ys:
            xs.append(t)
            ys.append(ys[-1])
        xs.append(t)
        ys.append(float(value))
    if ys:
        xs.append(horizon)
        ys.append(ys[-1])
    return xs, ys


def trace_figures(records: list[Record], out: Path) -> list[Path]:
    """One PNG per instance; returns their paths."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    backends = sorted({r["backend"] for r in records})
    colours = {b: plt.get_cmap("tab10")(i % 10) for i, b in enumerate(backends)}
    ref = reference_costs(records)
    written = []
    for instance in sorted({r["instance"] for r in records}):
        runs = [r for r in records if r["instance"] == instance]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        best = ref.get(instance)
        scale = float(best) if best else 1.0  # costs relative to the best found
        shown: list[float] = []
        for r in runs:
            horizon = float(r["timeout"])
            for column, style in ((1, "-"), (2, "--")):
                xs, ys = _steps(r.get("trace", []), horizon, column)
                ys = [y / scale for y in ys]
                keep = [k for k, y in enumerate(ys) if y > 0]  # a log axis: no zero bounds
                xs, ys = [xs[k] for k in keep], [ys[k] for k in keep]
                if xs:
                    shown += ys
                    label = r["backend"] + (" bound" if column == 2 else "")
                    first = r["seed"] == min(
                        x["seed"] for x in runs if x["backend"] == r["backend"]
                    )
                    ax.plot(
                        xs,
                        ys,
                        style,
                        color=colours[r["backend"]],
                        linewidth=1.4 if first else 0.7,
                        label=label if first else None,
                    )
        if shown:  # limits first: a flat trace would leave log scaling a zero span
            ax.set_ylim(max(min(shown), 1e-3) / 1.05, min(max(shown), 1e3) * 1.05)
        ax.set_yscale("log")
        ax.set_xscale("log")
        ax.set_xlabel("seconds since the backend started")
        ax.set_ylabel(
            "cost (solid), bound (dashed) / best found" if best else "cost (solid), bound (dashed)"
        )
        ax.set_title(instance if shown else f"{instance}: every cost and bound is 0")
        ax.grid(True, which="both", alpha=0.3)
        if shown:
            ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out / f"{instance}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def profile_figure(records: list[Record], path: Path) -> Path:
    plt = _pyplot()
    taus = [1 + k / 200 for k in range(0, 201)]  # 1.0 .. 2.0
    profile = performance_profile(records, taus)
    fig, ax = plt.subplots(figsize=(6, 4))
    for backend, shares in profile.items():
        ax.step(taus, shares, where="post", label=backend)
    ax.set_xlabel("tau: cost within this factor of the best any backend found")
    ax.set_ylabel("share of (instance, seed) runs")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(1.0, 2.0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("performance profile")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
