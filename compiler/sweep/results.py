"""results.csv: one row per point, appended as points finish, read back to resume.

Columns: `model`, one per grid option (its value as typed), then METRICS. Every value is text formatted by
the worker (fixed decimals), so a row does not depend on where it ran: the local pool and Ray write the
same bytes (except `compile_s`, a wall time of the machine that compiled). A row whose `status` is not one
of STATUSES (a line cut short when the sweep was killed) is ignored on reading and the point runs again.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from compiler.sweep.grid import Point, SweepError

METRICS = ("sim_us", "mfu", "hbm_bytes", "peak_sbuf_bytes", "compile_s", "max_rel_err", "instructions",
           "status", "error")
STATUSES = ("ok", "failed", "crashed", "timeout")
# Wall-clock columns: measurements of the machine, not of the point (excluded when comparing two runs).
WALL_CLOCK = ("compile_s",)


def columns(option_names: list[str]) -> list[str]:
    return ["model", *option_names, *METRICS]


def empty_row(point: Point, status: str, error: str) -> dict[str, str]:
    row = {"model": point.model, **dict(point.options)}
    row.update({m: "" for m in METRICS})
    row.update(status=status, error=error)
    return row


def row_key(row: dict[str, str], option_names: list[str]) -> tuple[str, ...]:
    return (row.get("model", ""),) + tuple(f"{k}={row.get(k, '')}" for k in option_names)


def read_rows(path: Path) -> list[dict[str, str]]:
    """The complete rows of an existing results.csv (none if it does not exist)."""
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{path}: cannot be read to resume the sweep ({e})") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        return []
    missing = [c for c in ("model", "status") if c not in reader.fieldnames]
    if missing:
        raise SweepError(f"{path}: not a results.csv of neuronc sweep (no {missing[0]!r} column); "
                         f"choose another --out")
    rows = []
    for row in reader:
        if None in row or any(v is None for v in row.values()) or row.get("status") not in STATUSES:
            continue  # a line cut short by a kill, or garbage: the point runs again
        rows.append({k: v for k, v in row.items()})
    return rows


class ResultsFile:
    """Appends rows as they arrive (one write and flush per row, so a kill loses at most the line in
    flight) and rewrites the file in grid order at the end."""

    def __init__(self, path: Path, option_names: list[str], previous: list[dict[str, str]]):
        self.path = path
        self.option_names = option_names
        previous_columns = list(dict.fromkeys(k for row in previous for k in row))
        extra = [c for c in previous_columns if c not in columns(option_names)]
        self.fieldnames = columns(option_names) + extra
        self.rows: dict[tuple[str, ...], dict[str, str]] = {row_key(r, option_names): r for r in previous}
        self._rewrite(list(self.rows.values()))  # a clean file with this grid's header (drops cut lines)

    def done(self, point: Point, retry_failed: bool = False) -> bool:
        row = self.rows.get(point.key)
        return row is not None and (not retry_failed or row["status"] == "ok")

    def add(self, row: dict[str, str]) -> None:
        self.rows[row_key(row, self.option_names)] = row
        buffer = io.StringIO()
        csv.DictWriter(buffer, fieldnames=self.fieldnames, restval="").writerow(row)
        with open(self.path, "a", newline="") as f:
            f.write(buffer.getvalue())
            f.flush()
            os.fsync(f.fileno())

    def finish(self, order: list[Point]) -> list[dict[str, str]]:
        """Rewrite results.csv: this sweep's points in grid order, then rows of other points kept from
        earlier runs in their previous order. Returns this sweep's rows."""
        mine = [self.rows[p.key] for p in order if p.key in self.rows]
        keys = {p.key for p in order}
        others = [r for k, r in self.rows.items() if k not in keys]
        self._rewrite(mine + others)
        return mine

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.fieldnames, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)
