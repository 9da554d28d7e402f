"""Run a sweep: skip the points results.csv already has, run the rest on an executor, write the charts."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from compiler.sweep.executors import Executor
from compiler.sweep.grid import Point, Sweep, SweepError
from compiler.sweep.plots import write_charts
from compiler.sweep.progress import Progress
from compiler.sweep.results import ResultsFile, read_rows


@dataclass
class SweepReport:
    """What a sweep did: its rows in grid order, how many points were resumed and run, the files written."""

    rows: list[dict[str, str]]
    resumed: int
    ran: int
    files: list[Path] = field(default_factory=list)

    @property
    def not_ok(self) -> list[dict[str, str]]:
        return [r for r in self.rows if r.get("status") != "ok"]


def run_sweep(sweep: Sweep, out: str | Path, executor: Executor, *, retry_failed: bool = False,
              charts: bool = True, pareto_axis: str = "hbm", stream: TextIO | None = None) -> SweepReport:
    """Run every point of `sweep` not yet in OUT/results.csv on `executor`; write results.csv (grid order)
    and, with `charts`, pareto.png and bars_<model>.png."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepError(f"--out {folder}: cannot create the folder ({e})") from None
    stream = stream or sys.stderr
    points = sweep.points()
    results = ResultsFile(folder / "results.csv", sweep.option_names, read_rows(folder / "results.csv"))
    todo: list[Point] = [p for p in points if not results.done(p, retry_failed)]
    resumed = len(points) - len(todo)
    stream.write(f"sweep: {len(points)} points ({len(sweep.models)} models x "
                 f"{len(points) // len(sweep.models)} configurations), {resumed} already in "
                 f"{folder / 'results.csv'}, {len(todo)} to run on {executor.name} ({executor.workers} workers)\n")
    progress = Progress(len(points), skipped=resumed, stream=stream)
    tasks = [_task_json(sweep, p) for p in todo]
    try:
        for index, row in executor.run(tasks):
            results.add(row)
            ok = row.get("status") == "ok"
            progress.update(ok, f"{todo[index].model} {todo[index].label}: "
                                + (f"{row['sim_us']} us" if ok else f"{row.get('status')}: {row.get('error', '')}"))
    finally:
        progress.close()
        rows = results.finish(points)
    report = SweepReport(rows, resumed, progress.done)
    report.files.append(folder / "results.csv")
    if charts:
        report.files += write_charts(rows, sweep.option_names, folder, pareto_axis)
    return report


def _task_json(sweep: Sweep, point: Point) -> str:
    return json.dumps(sweep.task(point), sort_keys=True)
