"""A PNG of an emulated run's per-engine timeline (matplotlib): one row per engine and DMA queue."""

from __future__ import annotations

from collections import defaultdict

from isa.emulator import Profile
from isa.program import ENGINES

COLORS = {  # by opcode; anything else grey
    "multiply_moving": "#1f77b4", "load_stationary": "#9ecae1", "transpose": "#6baed6",
    "activation": "#d62728", "tensor_copy": "#ff9896", "tensor_tensor": "#2ca02c", "tensor_scalar": "#98df8a",
    "tensor_reduce": "#9467bd", "bn_stats": "#c5b0d5", "bn_aggr": "#c5b0d5", "select": "#8c564b",
    "dma": "#ff7f0e", "iota": "#7f7f7f", "memset": "#7f7f7f",
}


def plot_timeline(profile: Profile, path: str, title: str) -> None:
    """Write the timeline of `profile` (engines, then DMA queues; busy % in the labels) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    tracks = [*ENGINES, *(f"dma.q{q}" for q in range(profile.queues))]
    bars: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for span in profile.spans:
        opcode = span.name.split(".", 1)[1] if "." in span.name else span.name
        bars[(span.track, opcode)].append((span.start_ns / 1000, max(span.dur_ns / 1000, 1e-4)))
    total_us = profile.time_us or 1.0
    busy = dict(profile.engine_busy)
    for q in range(profile.queues):
        busy[f"dma.q{q}"] = sum(d for (t, _), b in bars.items() if t == f"dma.q{q}" for _, d in b) / total_us
    fig, ax = plt.subplots(figsize=(16, 0.34 * len(tracks) + 1.6))
    row = {t: i for i, t in enumerate(tracks)}
    for (track, opcode), spans in bars.items():
        if track in row:
            ax.broken_barh(spans, (row[track] - 0.4, 0.8), facecolors=COLORS.get(opcode, "#bbbbbb"), linewidth=0)
    ax.set_yticks(range(len(tracks)), [f"{t} {100 * busy.get(t, 0.0):.0f}%" for t in tracks], fontsize=8)
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlim(0, total_us)
    ax.set_xlabel("simulated time (us)")
    ax.set_title(f"{title}: {profile.time_us:.1f} us, MFU {100 * profile.mfu:.1f}%", fontsize=10)
    used = sorted({op for (_, op) in bars}, key=lambda op: (op not in COLORS, op))
    ax.legend(handles=[Patch(color=COLORS.get(op, "#bbbbbb"), label=op) for op in used], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
