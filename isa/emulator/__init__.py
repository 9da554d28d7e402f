"""The NeuronCore emulator: numerics, machine-rule checks, race detector and timing.

``run_program(program, inputs)`` decodes the program once (checking every rule of
machine-model.md), runs it in global time order over the five engine streams and 16 DMA queues,
and returns the outputs with a ``Profile``.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from isa.emulator.checks import Checker
from isa.emulator.decode import decode_program
from isa.emulator.memory import Memory
from isa.emulator.profile import Profile, build_profile
from isa.emulator.scheduler import Scheduler
from isa.program import Program
from isa.target import Target, load_target

__all__ = ["Profile", "ProgressBar", "RunResult", "run_program"]


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]  # by output tensor name, shaped and typed as declared
    profile: Profile


class ProgressBar:
    """A one-line progress bar on stderr, shown only on a TTY once the run passes a second."""

    def __init__(self, delay_s: float = 1.0):
        self.t0 = time.monotonic()
        self.delay_s = delay_s
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.t0
        if elapsed < self.delay_s:
            return
        width = 40
        filled = int(width * done / max(total, 1))
        rate = done / elapsed
        sys.stderr.write(f"\remulating [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done}/{total} instructions, {rate:,.0f}/s")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates tens of thousands of long-lived
    objects (decoded ops, views), and repeated full collections over them doubled decode time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_program(program: Program, inputs: Mapping[str, np.ndarray], *, target: Target | None = None,
                check: bool = False, progress: bool = False) -> RunResult:
    """Run ``program`` on ``inputs`` (by input tensor name).

    ``check=True`` also detects reads of never-written memory (UninitializedReadError) and
    unordered conflicting accesses of two engines/queues (RaceError). Rule violations raise
    RuleViolation at decode time, before anything runs; a stuck program raises DeadlockError.
    """
    target = target or load_target(program.target)
    with _gc_paused():
        memory = Memory(program, target)
        memory.load_inputs(inputs)
        ops = decode_program(program, target, memory)
        observer = Checker(program, target, memory) if check else None
        bar = ProgressBar() if progress and sys.stderr.isatty() else None
        try:
            with np.errstate(all="ignore"):
                timeline = Scheduler(ops, target, observer, bar).run()
        finally:
            if bar:
                bar.close()
        outputs = {name: memory.read_tensor(name) for name in program.outputs}
        return RunResult(outputs, build_profile(program, target, ops, timeline))
