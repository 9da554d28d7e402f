"""Text and CSV forms of the by-op and by-layer rows of a profile."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from isa.emulator.attribution import LayerRow, OpRow

OP_COLUMNS = ("name", "time_us", "share", "bound_us", "efficiency", "bound_by", "roof", "compute_us", "memory_us",
              "overhead_us", "stall_us", "instructions", "dma_count", "dma_bytes", "bytes_per_dma", "dma_gbps", "flops",
              "hbm_bytes", "dma_hbm_bytes", "busy_pe_us", "busy_act_us", "busy_dve_us", "busy_pool_us",
              "busy_sp_us", "busy_dma_us", "source", "locations")
LAYER_COLUMNS = ("path", "time_us", "share", "bound_us", "bound_by", "compute_us", "memory_us", "overhead_us",
                 "stall_us", "flops", "hbm_bytes", "dma_count", "dma_bytes", "ops")


def _size(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if abs(n) < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def op_table(rows: Sequence[OpRow], total_us: float, top: int | None = None) -> str:
    """The by-op table: time share, achieved vs roofline bound, bytes per DMA, stalls, source."""
    shown = list(rows[:top] if top else rows)
    lines = [f"{'op':<28}{'time us':>11}{'share':>7}{'bound us':>10}{'of bound':>9}  {'bound by':<9}"
             f"{'DMAs':>6}{'B/DMA':>8}{'DMA GB/s':>9}{'stall us':>10}  source"]
    for r in shown:
        eff = f"{100 * r.efficiency:.0f}%" if r.bound_us else "-"
        lines.append(f"{_clip(r.name, 27):<28}{r.time_us:>11.2f}{100 * r.share:>6.1f}%{r.bound_us:>10.2f}{eff:>9}  "
                     f"{r.bound_by:<9}{r.dma_count:>6}{_size(r.bytes_per_dma):>8}{r.dma_gbps:>9.1f}"
                     f"{r.stall_us:>10.2f}  "
                     f"{_clip(r.source, 60)}")
    rest = rows[len(shown):]
    if rest:
        lines.append(f"{f'({len(rest)} more)':<28}{sum(r.time_us for r in rest):>11.2f}"
                     f"{100 * sum(r.share for r in rest):>6.1f}%")
    lines.append(f"{'total':<28}{sum(r.time_us for r in rows):>11.2f}{'':>7}   (run: {total_us:.2f} us)")
    return "\n".join(lines)


def layer_table(rows: Sequence[LayerRow], total_us: float, top: int | None = None) -> str:
    shown = list(rows[:top] if top else rows)
    lines = [f"{'layer':<36}{'time us':>11}{'share':>7}{'bound us':>10}  {'bound by':<9}{'ops':>5}"
             f"{'DMA bytes':>11}{'stall us':>10}"]
    for r in shown:
        lines.append(f"{_clip(r.path, 35):<36}{r.time_us:>11.2f}{100 * r.share:>6.1f}%{r.bound_us:>10.2f}  "
                     f"{r.bound_by:<9}{len(r.ops):>5}{_size(r.dma_bytes):>11}{r.stall_us:>10.2f}")
    rest = rows[len(shown):]
    if rest:
        lines.append(f"{f'({len(rest)} more)':<36}{sum(r.time_us for r in rest):>11.2f}"
                     f"{100 * sum(r.share for r in rest):>6.1f}%")
    lines.append(f"{'total':<36}{sum(r.time_us for r in rows):>11.2f}{'':>7}   (run: {total_us:.2f} us)")
    return "\n".join(lines)


def top_stalls(rows: Sequence[OpRow], top: int = 5) -> str:
    """The ops whose instructions waited longest on semaphores (the summary has the engine pairs)."""
    lines = []
    waiting = sorted((r for r in rows if r.stall_us > 0), key=lambda r: -r.stall_us)[:top]
    if waiting:
        lines.append("top stalls by op (its instructions waiting on semaphores):")
        lines += [f"  {_clip(r.name, 30):<31}{r.stall_us:>12.3f} us" for r in waiting]
    return "\n".join(lines)


def op_csv(rows: Sequence[OpRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(OP_COLUMNS)
    for r in rows:
        d = r.to_dict()
        d.update({f"busy_{k}_us": v for k, v in r.busy_us.items()}, efficiency=r.efficiency, dma_gbps=r.dma_gbps,
                 locations=" ".join(r.locations))
        writer.writerow([d[c] for c in OP_COLUMNS])
    return out.getvalue()


def layer_csv(rows: Sequence[LayerRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(LAYER_COLUMNS)
    for r in rows:
        d = r.to_dict()
        d["ops"] = " ".join(r.ops)
        writer.writerow([d[c] for c in LAYER_COLUMNS])
    return out.getvalue()
