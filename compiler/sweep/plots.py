"""The sweep's charts (matplotlib, the `sweep` extra): pareto.png and one bar chart per model.

pareto.png has one panel per model: every successful point as simulated time against HBM traffic (or
peak SBUF), the Pareto front (no other point is at least as good on both axes and better on one) drawn
as a red staircase with its points labelled by configuration.
bars_<model>.png: simulated time per configuration, a bar per point in grid order; a point that did not run
is an empty bar labelled with its status.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from compiler.sweep.grid import SweepError

plt: Any = None  # matplotlib.pyplot, imported when a chart is drawn (0.3 s: not at every `neuronc` start)


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None without matplotlib (write_charts says how to get it)."""
    global plt
    if plt is None:
        try:
            import matplotlib

            matplotlib.use("Agg")  # files only, no display
            import matplotlib.pyplot
        except ImportError:  # optional dependency (the `sweep` extra)
            return None
        plt = matplotlib.pyplot
    return plt

AXES = {"hbm": ("hbm_bytes", "HBM traffic (MiB)", 2**20), "sbuf": ("peak_sbuf_bytes", "peak SBUF (MiB)", 2**20)}


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (minimizing both coordinates), sorted by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front: list[int] = []
    best_y = math.inf
    for i in order:
        if points[i][1] < best_y:
            front.append(i)
            best_y = points[i][1]
    return front


def _ok(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in rows if r.get("status") == "ok"]


def label(row: dict[str, str], option_names: list[str]) -> str:
    return "/".join(row.get(k, "") for k in option_names) or "default"


def write_pareto(rows: list[dict[str, str]], option_names: list[str], path: Path, axis: str = "hbm") -> None:
    plt = _pyplot()
    column, xlabel, scale = AXES[axis]
    models = list(dict.fromkeys(r["model"] for r in rows))
    cols = min(3, len(models)) or 1
    nrows = math.ceil(len(models) / cols) or 1
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    for ax, model in zip(axes.flat, models, strict=False):
        mine = _ok([r for r in rows if r["model"] == model])
        ax.set_title(f"{model} ({len(mine)} of {sum(r['model'] == model for r in rows)} points ran)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("simulated time (us)")
        ax.grid(True, alpha=0.3)
        if not mine:
            ax.text(0.5, 0.5, "no point compiled", ha="center", va="center", transform=ax.transAxes)
            continue
        xy = [(int(r[column]) / scale, float(r["sim_us"])) for r in mine]
        ax.scatter([x for x, _ in xy], [y for _, y in xy], color="tab:gray", s=28, label="points", zorder=2)
        front = pareto_front(xy)
        fx, fy = [xy[i][0] for i in front], [xy[i][1] for i in front]
        ax.step(fx, fy, where="post", color="tab:red", linewidth=1.2, zorder=3)
        ax.scatter(fx, fy, color="tab:red", s=44, label="Pareto front", zorder=4)
        on_front = {xy[i] for i in front}
        same: dict[tuple[float, float], list[str]] = {}  # configurations with identical results share a label
        for i, row in enumerate(mine):
            same.setdefault(xy[i], []).append(label(row, option_names))
        for point, names in same.items():
            ax.annotate(" = ".join(names), point, textcoords="offset points", xytext=(5, 4), fontsize=7,
                        color="tab:red" if point in on_front else "dimgray")
        ys = [y for _, y in xy]
        if min(ys) > 0 and max(ys) / min(ys) > 8:
            ax.set_yscale("log")
        ax.legend(fontsize=8, loc="best")
    keys = "/".join(option_names) or "configuration"
    fig.suptitle(f"simulated time vs {xlabel.split(' (')[0]}; labels: {keys}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_bars(rows: list[dict[str, str]], option_names: list[str], model: str, path: Path) -> None:
    plt = _pyplot()
    mine = [r for r in rows if r["model"] == model]
    labels = [label(r, option_names) for r in mine]
    times = [float(r["sim_us"]) if r.get("status") == "ok" else 0.0 for r in mine]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.75 * len(mine) + 2), 4.2))
    colors = ["tab:blue" if r.get("status") == "ok" else "white" for r in mine]
    bars = ax.bar(range(len(mine)), times, color=colors, edgecolor="black", linewidth=0.6)
    top = max(times, default=0.0) or 1.0
    for bar, r, t in zip(bars, mine, times, strict=True):
        text = f"{t:.1f}" if r.get("status") == "ok" else r.get("status", "?")
        ax.text(bar.get_x() + bar.get_width() / 2, t + 0.01 * top, text, ha="center", va="bottom", fontsize=8,
                color="black" if r.get("status") == "ok" else "tab:red")
    ax.set_xticks(range(len(mine)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("simulated time (us)")
    ax.set_ylim(0, top * 1.12)
    ax.set_title(f"{model}: simulated time by {'/'.join(option_names) or 'configuration'}")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_charts(rows: list[dict[str, str]], option_names: list[str], out: Path, axis: str = "hbm") -> list[Path]:
    """pareto.png and bars_<model>.png in `out`; returns the paths written."""
    if _pyplot() is None:
        raise SweepError(f"the charts need matplotlib: pip install 'neuronc[sweep]' (results are in "
                         f"{out / 'results.csv'}; --no-charts skips them)")
    written = [out / "pareto.png"]
    write_pareto(rows, option_names, written[0], axis)
    for model in dict.fromkeys(r["model"] for r in rows):
        path = out / f"bars_{model}.png"
        write_bars(rows, option_names, model, path)
        written.append(path)
    return written
