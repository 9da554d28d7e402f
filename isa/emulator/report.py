"""The profile as one self-contained HTML file: inline SVG written here, no script, no network.

Sections: a summary, the per-engine timeline coloured by op (HLO instruction or fusion), a roofline
chart with one point per op, the by-layer tree and by-op tables, and the DMA transfer size histogram.

The timeline is drawn at one column per pixel: in each column of each track the op with the most
busy time there gives the colour and the busy fraction the opacity, and runs of equal columns become
one rectangle. So the file grows with the width of the picture, not with the length of the program:
a track has at most ``TIMELINE_WIDTH`` rectangles whatever the model.
"""

from __future__ import annotations

import html
import math
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from isa.constants import write_atomic
from isa.emulator.attribution import NO_MODULE, UNTAGGED, LayerRow, OpRow, Records, layer_of
from isa.program import ENGINES

TIMELINE_WIDTH = 1200  # px of the time axis: columns per track
LABEL_WIDTH = 70
ENGINE_ROW, QUEUE_ROW = 22, 7
OPACITY_LEVELS = 4  # busy fraction of a column, quantized (fewer, longer rectangles)
MAX_OP_ROWS = 2000  # rows of the by-op table (the rest: a line saying how many, and their time)

CSS = """
body{font:13px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:18px;color:#222}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px} td,th{padding:2px 7px;border-bottom:1px solid #eee;
text-align:right;white-space:nowrap} th{background:#f4f4f4;position:sticky;top:0}
td.l,th.l{text-align:left} td.src{text-align:left;white-space:normal;min-width:320px;max-width:560px;
color:#555;font-size:11px}
.sw{display:inline-block;width:10px;height:10px;margin-right:5px;vertical-align:middle}
.summary td{text-align:left;border:0;padding:1px 10px 1px 0} .note{color:#666;font-size:12px}
.bar{display:inline-block;height:9px;background:#4a7fb5;vertical-align:middle}
svg text{font:11px system-ui,Helvetica,Arial,sans-serif;fill:#333}
.legend span{margin-right:14px;white-space:nowrap}
"""


class Profile(Protocol):
    """What the report reads of ``isa.emulator.profile.Profile``."""

    target: str
    time_us: float
    mfu: float
    engine_busy: dict[str, float]
    hbm_read_bytes: int
    hbm_write_bytes: int
    records: Records | None
    pe_flops_per_ns: float
    hbm_bytes_per_ns: float

    def by_op(self) -> list[OpRow]: ...
    def by_layer(self, depth: int | None = None) -> list[LayerRow]: ...
    def traced_fraction(self) -> float: ...


def color(name: str) -> str:
    """A stable colour per op name."""
    h = zlib.crc32(name.encode())
    return f"hsl({h % 360},{55 + (h >> 9) % 30}%,{42 + (h >> 17) % 18}%)"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _us(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3g} s"
    if value >= 1e3:
        return f"{value / 1e3:.4g} ms"
    return f"{value:.4g} us"


def short_location(location: str) -> str:
    """``file:line`` without the install prefix (``transformers/activations.py:66``) or the leading folders."""
    marker = "site-packages/"
    if marker in location:
        return location.split(marker, 1)[1]
    parts = location.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# -- timeline ---------------------------------------------------------------------------------------------------
def _track_intervals(rec: Records) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, int]]:
    """(track name, start ns, end ns, origin ids, row height) for every engine and DMA queue track."""
    tracks = []
    for i, engine in enumerate(ENGINES):
        mine = rec.engine == i
        tracks.append((engine, rec.start[mine], rec.end[mine], rec.origin[mine], ENGINE_ROW))
    queues = sorted(int(q) for q in np.unique(rec.queue) if q >= 0)
    for q in queues:
        mine = rec.queue == q
        tracks.append((f"dma.q{q}", rec.transfer_start[mine], rec.transfer_end[mine], rec.origin[mine], QUEUE_ROW))
    return tracks


def column_winners(start: np.ndarray, end: np.ndarray, origin: np.ndarray, scale: float,
                   width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per pixel column: the origin id with the largest overlap (-1 for none) and the busy fraction."""
    winner, busy = np.full(width, -1, np.int64), np.zeros(width)
    keep = end > start
    if not keep.any():
        return winner, busy
    x0, x1, o = start[keep] * scale, end[keep] * scale, origin[keep].astype(np.int64)
    c0 = np.clip(np.floor(x0).astype(np.int64), 0, width - 1)
    c1 = np.clip(np.ceil(x1).astype(np.int64) - 1, 0, width - 1)
    c1 = np.maximum(c1, c0)
    n = c1 - c0 + 1
    owner = np.repeat(np.arange(len(c0)), n)
    col = c0[owner] + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    overlap = np.minimum(x1[owner], col + 1.0) - np.maximum(x0[owner], col.astype(np.float64))
    overlap = np.clip(overlap, 0.0, 1.0)
    busy = np.minimum(1.0, np.bincount(col, overlap, minlength=width))
    order = np.lexsort((overlap, col))  # by column, largest overlap last
    last = np.r_[col[order][1:] != col[order][:-1], True]
    winner[col[order][last]] = o[owner[order][last]]
    return winner, busy


def _runs(winner: np.ndarray, level: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(first column, length, origin id, opacity level) of each run of equal columns, gaps left out."""
    change = np.flatnonzero(np.r_[True, (winner[1:] != winner[:-1]) | (level[1:] != level[:-1])])
    ends = np.r_[change[1:], len(winner)]
    return [(int(a), int(b - a), int(winner[a]), int(level[a])) for a, b in zip(change, ends, strict=True)
            if winner[a] >= 0]


def _layer_track(rec: Records, rows: Sequence[OpRow], depth: int) -> tuple[tuple, list[str], list[str]]:
    """The track on top: all work (engines and transfers), each origin standing for its first module
    cut to ``depth``; with the colours and titles of those layers."""
    info = {r.name: r for r in rows}
    layers: dict[str, int] = {}

    def layer(name: str) -> str:
        row = info.get(name or UNTAGGED)
        return layer_of(row.modules[0], depth) if row is not None and row.modules else NO_MODULE

    of_origin = np.array([layers.setdefault(layer(n), len(layers)) for n in rec.names], np.int64)
    dma = rec.queue >= 0
    start = np.concatenate([rec.start[rec.engine < ENGINES.index("sp")], rec.transfer_start[dma]])
    end = np.concatenate([rec.end[rec.engine < ENGINES.index("sp")], rec.transfer_end[dma]])
    ids = of_origin[np.concatenate([rec.origin[rec.engine < ENGINES.index("sp")], rec.origin[dma]])]
    names = list(layers)
    return (f"layer ({depth})", start, end, ids, ENGINE_ROW), [color(n) for n in names], [_e(n) for n in names]


def timeline_svg(prof: Profile, rows: Sequence[OpRow], depth: int | None = None) -> str:
    """The layer track (work of any engine or queue, coloured by torch module at ``depth``, default 2),
    then one track per engine and DMA queue coloured by op."""
    rec = prof.records
    assert rec is not None
    total = max(rec.total_ns, 1e-9)
    scale = TIMELINE_WIDTH / total
    info = {r.name: r for r in rows}
    titles = []
    for name in rec.names:
        row = info.get(name or UNTAGGED)
        where = f" - {', '.join(row.modules)}" if row and row.modules else ""
        titles.append(_e(f"{name or UNTAGGED}{where}" + (f" ({_us(row.time_us)}, {100 * row.share:.1f}%)"
                                                         if row else "")))
    colors = [color(n or UNTAGGED) for n in rec.names]
    layer_track, layer_colors, layer_titles = _layer_track(rec, rows, depth or 2)
    tracks = [(layer_track, layer_colors, layer_titles)]
    tracks += [(t, colors, titles) for t in _track_intervals(rec)]
    top = 24
    height = top + sum(t[0][4] + 2 for t in tracks) + 6
    width = LABEL_WIDTH + TIMELINE_WIDTH + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="per-engine timeline">']
    step = _nice_step(total / 1000 / 8)
    t = 0.0
    while t <= total / 1000 + 1e-9:
        x = LABEL_WIDTH + t * 1000 * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 2}" stroke="#e4e4e4"/>'
                   f'<text x="{x:.1f}" y="{top - 8}" text-anchor="middle">{_e(_us(t))}</text>')
        t += step
    y = top
    for (name, start, end, ids, row_height), fills, tips in tracks:
        winner, busy = column_winners(start, end, ids, scale, TIMELINE_WIDTH)
        level = np.ceil(busy * OPACITY_LEVELS).astype(np.int64)
        out.append(f'<text x="{LABEL_WIDTH - 6}" y="{y + row_height - 1 if row_height < 12 else y + 15}" '
                   f'text-anchor="end" style="font-size:{9 if row_height < 12 else 11}px">{_e(name)}</text>')
        out.append(f'<rect x="{LABEL_WIDTH}" y="{y}" width="{TIMELINE_WIDTH}" height="{row_height}" fill="#f7f7f7"/>')
        for x0, n, o, lv in _runs(winner, level):
            opacity = 0.35 + 0.65 * lv / OPACITY_LEVELS
            out.append(f'<rect x="{LABEL_WIDTH + x0}" y="{y}" width="{n}" height="{row_height}" fill="{fills[o]}"'
                       + (f' fill-opacity="{opacity:.2f}"' if lv < OPACITY_LEVELS else "")
                       + f'><title>{tips[o]}</title></rect>')
        y += row_height + (6 if y == top else 2)
    out.append("</svg>")
    return "".join(out)


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def legend(rows: Sequence[OpRow], top: int = 14) -> str:
    items = [f'<span><i class="sw" style="background:{color(r.name)}"></i>{_e(r.name)} '
             f'({100 * r.share:.1f}%)</span>' for r in rows[:top]]
    return f'<div class="legend">{"".join(items)}</div>'


# -- roofline ---------------------------------------------------------------------------------------------------
def roofline_svg(prof: Profile, rows: Sequence[OpRow]) -> tuple[str, str]:
    """The chart and a note on the ops it cannot place (no FLOPs or no bytes)."""
    peak = prof.pe_flops_per_ns * 1e9  # FLOP/s, bf16
    bandwidth = prof.hbm_bytes_per_ns * 1e9  # B/s
    points = [r for r in rows if r.flops > 0 and r.hbm_bytes > 0 and r.time_us > 0]
    left_out = [r for r in rows if r not in points]
    note = (f"{len(points)} ops placed; {len(left_out)} without FLOPs or bytes left out "
            f"({100 * sum(r.share for r in left_out):.1f}% of the time).")
    w, h, ml, mb, mt, mr = 760, 430, 70, 46, 14, 20
    ridge = peak / bandwidth
    xs = [r.flops / r.hbm_bytes for r in points] + [ridge]
    ys = [r.flops / (r.time_us * 1e-6) for r in points] + [peak]
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs) / 2)), 10 ** math.ceil(math.log10(max(xs) * 2))
    y_lo, y_hi = 10 ** math.floor(math.log10(min(ys) / 2)), 10 ** math.ceil(math.log10(peak * 2))

    def px(v: float) -> float:
        return ml + (math.log10(v) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (w - ml - mr)

    def py(v: float) -> float:
        return mt + (math.log10(y_hi) - math.log10(v)) / (math.log10(y_hi) - math.log10(y_lo)) * (h - mt - mb)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'role="img" aria-label="roofline">',
           f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fcfcfc" stroke="#bbb"/>']
    for e in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):
        x = px(10.0 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{h - mb}" stroke="#eee"/>'
                   f'<text x="{x:.1f}" y="{h - mb + 14}" text-anchor="middle">1e{e}</text>')
    for e in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        y = py(10.0 ** e)
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{w - mr}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{ml - 5}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<text x="{(ml + w - mr) / 2}" y="{h - 8}" text-anchor="middle">operational intensity '
               f'(FLOP per compulsory HBM byte)</text>'
               f'<text transform="translate(14,{(mt + h - mb) / 2}) rotate(-90)" text-anchor="middle">'
               f'achieved FLOP/s</text>')
    for label, top_flops, dash in (("PE peak bf16", peak, ""), ("fp32", peak / 4, ' stroke-dasharray="5,4"')):
        knee = top_flops / bandwidth
        pts = [(x_lo, x_lo * bandwidth), (knee, top_flops), (x_hi, top_flops)]
        pts = [(max(x, x_lo), max(y, y_lo)) for x, y in pts]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="#c0392b" stroke-width="1.6"{dash}/>'
                   f'<text x="{w - mr - 4}" y="{py(top_flops) - 4:.1f}" text-anchor="end" fill="#c0392b">'
                   f'{label} {top_flops / 1e12:.3g} TFLOP/s</text>')
    out.append(f'<text x="{px(x_lo) + 6:.1f}" y="{py(max(y_lo, x_lo * bandwidth)) - 6:.1f}" fill="#c0392b">'
               f'HBM {bandwidth / 1e9:.0f} GB/s</text>')
    for r in sorted(points, key=lambda r: -r.time_us):
        x, y = px(r.flops / r.hbm_bytes), py(r.flops / (r.time_us * 1e-6))
        radius = 2.5 + 11 * math.sqrt(r.share)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{color(r.name)}" fill-opacity="0.75" '
                   f'stroke="#333" stroke-width="0.5"><title>{_e(r.name)}: {_e(_us(r.time_us))}, '
                   f'{r.flops / (r.time_us * 1e-6) / 1e12:.3g} TFLOP/s, {_e(r.source[:120])}</title></circle>')
    out.append("</svg>")
    return "".join(out), note


# -- histogram --------------------------------------------------------------------------------------------------
def dma_histogram_svg(rec: Records) -> str:
    is_dma = rec.queue >= 0
    sizes = rec.nbytes[is_dma]
    times = (rec.transfer_end - rec.transfer_start)[is_dma]
    if not len(sizes):
        return '<p class="note">No DMA transfers.</p>'
    bins = np.floor(np.log2(np.maximum(sizes, 1))).astype(np.int64)
    lo, hi = int(bins.min()), int(bins.max())
    counts = np.bincount(bins - lo, minlength=hi - lo + 1)
    spent = np.bincount(bins - lo, times, minlength=hi - lo + 1)
    w, h, ml, mb, mt = 760, 260, 60, 58, 16
    bar = (w - ml - 10) / len(counts)
    top = max(int(counts.max()), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'role="img" aria-label="DMA size histogram">']
    for i, (count, t) in enumerate(zip(counts, spent, strict=True)):
        x = ml + i * bar
        bh = (h - mt - mb) * count / top
        out.append(f'<rect x="{x + 1:.1f}" y="{h - mb - bh:.1f}" width="{max(bar - 2, 1):.1f}" height="{bh:.1f}" '
                   f'fill="#4a7fb5"><title>{_bytes(2 ** (lo + i))} - {_bytes(2 ** (lo + i + 1))}: {count} '
                   f'transfers, {_e(_us(t / 1000))} of transfer time</title></rect>')
        if count:
            out.append(f'<text x="{x + bar / 2:.1f}" y="{h - mb - bh - 3:.1f}" text-anchor="middle">{count}</text>')
        out.append(f'<text transform="translate({x + bar / 2 + 4:.1f},{h - mb + 8}) rotate(45)">'
                   f'{_bytes(2 ** (lo + i))}</text>')
    out.append(f'<line x1="{ml}" y1="{h - mb}" x2="{w - 10}" y2="{h - mb}" stroke="#999"/>'
               f'<text transform="translate(16,{(mt + h - mb) / 2}) rotate(-90)" text-anchor="middle">'
               f'transfers</text></svg>')
    return "".join(out)


# -- tables -----------------------------------------------------------------------------------------------------
def _natural(path: str) -> list[object]:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"\.", path)]


def layer_tree_table(prof: Profile, depth: int | None) -> str:
    rows = prof.by_op()
    deepest = max((len(m.split(".")) for r in rows for m in r.modules), default=1)
    limit = min(depth, deepest) if depth else deepest
    levels = {d: {g.path: g for g in prof.by_layer(d)} for d in range(1, limit + 1)}
    order = sorted({p for d in levels for p in levels[d] if p != NO_MODULE},
                   key=lambda p: _natural(p))
    body = []
    for path in [*order, NO_MODULE]:
        d = 1 if path == NO_MODULE else len(path.split("."))
        g = levels.get(d, {}).get(path)
        if g is None:
            continue
        name = path if path == NO_MODULE else path.split(".")[-1] if d > 1 else path
        body.append(f'<tr><td class="l" style="padding-left:{8 + 16 * (d - 1)}px" title="{_e(path)}">{_e(name)}</td>'
                    f'<td>{g.time_us:.2f}</td><td class="l"><i class="bar" style="width:{200 * g.share:.0f}px"></i> '
                    f'{100 * g.share:.1f}%</td><td>{g.bound_us:.2f}</td><td>{g.compute_us:.2f}</td>'
                    f'<td>{g.memory_us:.2f}</td><td>{g.overhead_us:.2f}</td><td class="l">{g.bound_by}</td>'
                    f'<td>{len(g.ops)}</td><td>{_e(_bytes(g.dma_bytes))}</td></tr>')
    head = ('<tr><th class="l">module</th><th>time us</th><th class="l">share</th><th>bound us</th>'
            '<th>compute us</th><th>memory us</th><th>overhead us</th><th class="l">bound by</th><th>ops</th>'
            '<th>DMA bytes</th></tr>')
    return f"<table>{head}{''.join(body)}</table>"


def op_table_html(rows: Sequence[OpRow]) -> str:
    head = ('<tr><th class="l">op</th><th>time us</th><th>share</th><th>bound us</th><th>of bound</th>'
            '<th class="l">bound by</th><th class="l">roof</th><th>PE us</th><th>ACT us</th><th>DVE us</th>'
            '<th>POOL us</th><th>DMA us</th><th>DMAs</th><th>bytes/DMA</th><th>DMA GB/s</th><th>stall us</th>'
            '<th>GFLOP</th><th>HBM bytes</th><th class="l">source</th></tr>')
    body = []
    for r in rows[:MAX_OP_ROWS]:
        eff = f"{100 * r.efficiency:.0f}%" if r.bound_us else "-"
        b = r.busy_us
        body.append(f'<tr><td class="l"><i class="sw" style="background:{color(r.name)}"></i>{_e(r.name)}</td>'
                    f'<td>{r.time_us:.2f}</td><td>{100 * r.share:.2f}%</td><td>{r.bound_us:.2f}</td><td>{eff}</td>'
                    f'<td class="l">{r.bound_by}</td><td class="l">{r.roof}</td><td>{b["pe"]:.1f}</td>'
                    f'<td>{b["act"]:.1f}</td><td>{b["dve"]:.1f}</td><td>{b["pool"]:.1f}</td><td>{b["dma"]:.1f}</td>'
                    f'<td>{r.dma_count}</td><td>{_e(_bytes(r.bytes_per_dma))}</td><td>{r.dma_gbps:.1f}</td>'
                    f'<td>{r.stall_us:.2f}</td>'
                    f'<td>{r.flops / 1e9:.3g}</td><td>{_e(_bytes(r.hbm_bytes))}</td>'
                    f'<td class="src">{_e(r.source[:300])}'
                    + (f'<br>{_e(" ".join(short_location(x) for x in r.locations[:3]))}' if r.locations else "")
                    + '</td></tr>')
    rest = rows[MAX_OP_ROWS:]
    if rest:
        body.append(f'<tr><td class="l">({len(rest)} more ops: see --csv)</td>'
                    f'<td>{sum(r.time_us for r in rest):.2f}</td><td>{100 * sum(r.share for r in rest):.2f}%</td></tr>')
    return f"<table>{head}{''.join(body)}</table>"


def summary_html(prof: Profile, rows: Sequence[OpRow]) -> str:
    traffic = prof.hbm_read_bytes + prof.hbm_write_bytes
    busy = ", ".join(f"{e} {100 * v:.0f}%" for e, v in prof.engine_busy.items())
    items = [("target", prof.target), ("time", _us(prof.time_us)), ("MFU", f"{100 * prof.mfu:.2f}%"),
             ("HBM traffic", f"{_bytes(traffic)} ({traffic / max(prof.time_us, 1e-9) / 1e3:.1f} GB/s)"),
             ("engines busy", busy), ("ops", str(len(rows))),
             ("time traced to torch modules", f"{100 * prof.traced_fraction():.1f}%"),
             ("attribution", "each busy engine's share of each time slice (DMA queues count as one engine; "
                             "DMA fixed costs and waits with nothing running are overhead)")]
    return '<table class="summary">' + "".join(f"<tr><td><b>{_e(k)}</b></td><td>{_e(v)}</td></tr>"
                                               for k, v in items) + "</table>"


def render(prof: Profile, *, depth: int | None = None, title: str = "neuronc profile") -> str:
    rows = prof.by_op()
    parts = [f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
             f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>", summary_html(prof, rows)]
    if prof.records is not None and len(prof.records.start):
        roofline, note = roofline_svg(prof, rows)
        parts += ["<h2>Timeline</h2>",
                  f'<p class="note">One column per {_us(prof.time_us / TIMELINE_WIDTH)}: the op (on the top track: '
                  f"the torch module) busiest in it gives the colour, the busy fraction the opacity. Hover for "
                  f"names.</p>",
                  timeline_svg(prof, rows, depth), legend(rows),
                  "<h2>Roofline</h2>", f'<p class="note">{_e(note)} Point area grows with the op\'s time.</p>',
                  roofline,
                  "<h2>By layer</h2>", layer_tree_table(prof, depth),
                  "<h2>By op</h2>", op_table_html(rows),
                  "<h2>DMA transfer sizes</h2>", dma_histogram_svg(prof.records)]
    parts.append("</body></html>\n")
    return "".join(parts)


def write_html(prof: Profile, path: str, *, depth: int | None = None, title: str = "neuronc profile") -> int:
    data = render(prof, depth=depth, title=title).encode()
    write_atomic(Path(path), data)
    return len(data)


__all__ = ["color", "column_winners", "layer_of", "render", "write_html"]
