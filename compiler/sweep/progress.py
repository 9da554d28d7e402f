"""The sweep's progress bar with an ETA, on stderr.

On a terminal it redraws one line; otherwise (a log file, CI) it prints one line per finished point.
The ETA is the wall time per point finished so far in this run (elapsed / finished, so parallel workers
are already counted) times the points left.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    def __init__(self, total: int, skipped: int = 0, stream: TextIO | None = None, width: int = 30):
        self.total = total
        self.skipped = skipped
        self.done = 0
        self.failed = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, now: float | None = None) -> str:
        elapsed = (now if now is not None else time.monotonic()) - self.t0
        todo = self.total - self.skipped
        finished = self.skipped + self.done
        filled = int(self.width * finished / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        eta = _clock(elapsed / self.done * (todo - self.done)) if self.done else "?"
        if self.done == todo:
            eta = "0m00s"
        failed = f", {self.failed} not ok" if self.failed else ""
        return (f"[{bar}] {finished}/{self.total} points ({self.skipped} resumed{failed}), "
                f"elapsed {_clock(elapsed)}, ETA {eta}")

    def update(self, ok: bool, label: str = "") -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if self.tty:
            self.stream.write("\r" + self.line() + "\x1b[K")
        else:
            self.stream.write(self.line() + (f"  {label}" if label else "") + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
