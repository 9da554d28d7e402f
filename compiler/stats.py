"""Where a compilation spends its time and memory: ``neuronc compile --time-passes`` and
``Executable.compile_stats``.

A ``CompileStats`` records one row per phase (capture, every pass run, each backend phase, the
.neff write): wall seconds and the peak resident memory of the process during the phase. The peak
comes from Linux's per-process high-water mark (``VmHWM`` in /proc/self/status, reset before each
phase by writing 5 to /proc/self/clear_refs), which costs nothing while the phase runs, unlike
tracemalloc; elsewhere it is ``ru_maxrss``, the peak so far. It also drives the compile's progress
line (``Progress``): shown on a terminal once a compile passes two seconds, never with ``quiet``.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak() -> bool:
    """Reset the process's resident-memory high-water mark; False where the kernel does not offer it."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """The resident-memory high-water mark (since the last reset, on Linux), in bytes."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class PhaseStat:
    name: str
    seconds: float
    peak_bytes: int
    kind: str  # "frontend", "pass", "backend", "cache" or "output"
    cpu_seconds: float = float("nan")  # process CPU time (wall time on a busy machine says little)


class Progress:
    """One status line on stderr naming the current phase, from ``delay_s`` on; TTY only."""

    def __init__(self, what: str = "compiling", delay_s: float = 2.0, stream: TextIO | None = None,
                 enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.what, self.delay_s, self.t0, self.shown = what, delay_s, time.monotonic(), False

    def update(self, phase: str, done: int) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.t0
        if elapsed < self.delay_s:
            return
        self.stream.write(f"\r\033[K{self.what}: {phase} (phase {done + 1}) {elapsed:.1f} s")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


@dataclass
class CompileStats:
    """Per-phase wall time and peak memory of one compilation."""

    phases: list[PhaseStat] = field(default_factory=list)
    progress: Progress | None = None
    cache: str = ""  # "hit", "miss", "off" or "" (not asked)

    @contextmanager
    def phase(self, name: str, kind: str = "backend") -> Iterator[None]:
        """Time the body as phase ``name``."""
        if self.progress:
            self.progress.update(name, len(self.phases))
        reset_peak()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.phases.append(PhaseStat(name, seconds, peak_rss_bytes(), kind, time.process_time() - cpu))

    def add(self, name: str, seconds: float, peak_bytes: int, kind: str, cpu_seconds: float = float("nan")) -> None:
        self.phases.append(PhaseStat(name, seconds, peak_bytes, kind, cpu_seconds))
        if self.progress:
            self.progress.update(name, len(self.phases))

    @property
    def total_seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    def by_name(self) -> dict[str, PhaseStat]:
        """Phases of the same name summed (a pass run at every fixed-point iteration), peak = max."""
        merged: dict[str, PhaseStat] = {}
        for p in self.phases:
            if p.name in merged:
                m = merged[p.name]
                merged[p.name] = PhaseStat(p.name, m.seconds + p.seconds, max(m.peak_bytes, p.peak_bytes), p.kind,
                                           m.cpu_seconds + p.cpu_seconds)
            else:
                merged[p.name] = PhaseStat(p.name, p.seconds, p.peak_bytes, p.kind, p.cpu_seconds)
        return merged

    def table(self) -> str:
        """``--time-passes``: one row per phase (passes summed over their runs), in order."""
        rows = list(self.by_name().values())
        total = self.total_seconds or 1e-12
        width = max([len("phase"), *(len(r.name) for r in rows)])
        lines = [f"{'phase':<{width}}  {'kind':<8}  {'time (s)':>9}  {'share':>6}  {'cpu (s)':>8}  "
                 f"{'peak RSS (MiB)':>14}"]
        for r in rows:
            lines.append(f"{r.name:<{width}}  {r.kind:<8}  {r.seconds:>9.3f}  {100 * r.seconds / total:>5.1f}%  "
                         f"{r.cpu_seconds:>8.3f}  {r.peak_bytes / 2**20:>14.1f}")
        cpu = sum(r.cpu_seconds for r in rows)
        lines.append(f"{'total':<{width}}  {'':<8}  {total:>9.3f}  {'100.0%':>6}  {cpu:>8.3f}  "
                     f"{max((r.peak_bytes for r in rows), default=0) / 2**20:>14.1f}")
        if self.cache:
            lines.append(f"compile cache: {self.cache}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"cache": self.cache,
                "phases": [{"name": p.name, "kind": p.kind, "seconds": p.seconds, "cpu_seconds": p.cpu_seconds,
                            "peak_bytes": p.peak_bytes} for p in self.phases]}
