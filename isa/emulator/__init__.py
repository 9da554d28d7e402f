"""The NeuronCore emulator: numerics, machine-rule checks, race detector and timing.

``run_program(program, inputs)`` decodes the program once (checking every rule of
machine-model.md), runs it in global time order over the five engine streams and 16 DMA queues,
and returns the outputs with a ``Profile``. ``Emulator(program)`` keeps the decoded program for
further runs, which replay the recorded order of the numerics without scheduling again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from isa.checks import CHECKS
from isa.collector import long_lived as _long_lived  # decode's ~9 objects per instruction
from isa.collector import paused as _gc_paused  # a run allocates views and temporaries by the thousand
from isa.emulator.checks import Checker
from isa.emulator.control import ControlScheduler, check_control, has_control
from isa.emulator.decode import decode_program
from isa.emulator.kernels import EngineState
from isa.emulator.memory import Memory
from isa.emulator.profile import Profile, build_profile
from isa.emulator.scheduler import Scheduler
from isa.errors import InputError
from isa.program import Program
from isa.target import Target, load_target

__all__ = ["CHECKS", "Emulator", "Profile", "ProgressBar", "RunResult", "checks_level", "run_program"]


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]  # by output tensor name, shaped and typed as declared
    profile: Profile


class ProgressBar:
    """A one-line progress bar on stderr, shown only on a TTY once the run passes two seconds."""

    def __init__(self, delay_s: float = 2.0):
        self.t0 = time.monotonic()
        self.delay_s = delay_s
        self.shown = False

    def __call__(self, done: int, total: int | None) -> None:
        """``done`` of ``total`` instructions executed; ``total=None`` when it is not known before the run
        ends (loops and branches): the count and rate without a bar."""
        elapsed = time.monotonic() - self.t0
        if elapsed < self.delay_s:
            return
        rate = done / elapsed
        if total is None:
            sys.stderr.write(f"\remulating {done} instructions (with loops), {rate:,.0f}/s")
        else:
            width = 40
            filled = min(width, int(width * done / max(total, 1)))
            sys.stderr.write(f"\remulating [{'#' * filled}{'.' * (width - filled)}] "
                             f"{done}/{total} instructions, {rate:,.0f}/s")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


# control opcodes that read data (SBUF) into the control state: a program using one is scheduled on every run
DATA_CONTROL = frozenset({"reg_load"})



def checks_level(check: bool = False, checks: str | None = None) -> str:
    """The checks level of ``check`` (the older boolean: ``True`` is ``full``) and ``checks``."""
    if checks is None:
        return "full" if check else "rules"
    if checks not in CHECKS:
        raise InputError(f"checks must be one of {', '.join(CHECKS)}, got {checks!r}")
    if check and checks != "full":
        raise InputError(f"check=True asks for the full checks, but checks={checks!r}")
    return checks


def _reset_state(state: EngineState, partitions: int) -> None:
    """Put the engine state back to a fresh one's, in place (decoded closures hold its arrays)."""
    fresh = EngineState(partitions)
    for name, value in vars(fresh).items():
        if name == "scratch":  # no state: contents live for one instruction
            continue
        mine = getattr(state, name)
        if isinstance(value, np.ndarray) and isinstance(mine, np.ndarray) and mine.shape == value.shape:
            mine[...] = value
        else:
            setattr(state, name, value)


class Emulator:
    """A program decoded once for a target (rules checked, views and numerics closures built) and
    run any number of times.

    The first run schedules the program in global time order (timing, semaphores, DMA queues)
    and records the order its numerics ran in. Timing never depends on data, so later runs
    replay that order without the scheduler and return the first run's profile: the outputs
    are bit for bit those a full scheduled run gives. ``checks="full"`` schedules every run (the
    race detector and the uninitialized-read checks observe the schedule).
    """

    def __init__(self, program: Program, target: Target | None = None, *, checks: str = "rules"):
        self.program = program
        self.target = target or load_target(program.target)
        self.checks = checks_level(checks=checks)
        with _long_lived():
            self.memory = Memory(program, self.target)
            self.state = EngineState(self.target.partitions)
            self.ops = decode_program(program, self.target, self.memory, rules=self.checks != "off",
                                      state=self.state)
        # control flow (branches, loops): checked statically. Its timing and order depend on data only through
        # reg_load (a register read from SBUF); without one, later runs replay the first like straight-line code
        self.labels = check_control(program, self.target) if has_control(program) else None
        self.data_dependent = self.labels is not None and any(op.opcode in DATA_CONTROL for op in self.ops)
        self.replay: list[Callable[[], None]] | None = None  # numerics in the order they ran
        self.profile: Profile | None = None

    def run(self, inputs: Mapping[str, np.ndarray], *, progress: bool = False) -> RunResult:
        """Run on ``inputs`` (by input tensor name); see ``run_program``."""
        memory = self.memory
        with _gc_paused():
            memory.reset()
            _reset_state(self.state, self.target.partitions)
            memory.used = True
            memory.load_inputs(inputs)
            bar = ProgressBar() if progress and sys.stderr.isatty() else None
            try:
                with np.errstate(all="ignore"):
                    if self.replay is None or self.checks == "full" or self.data_dependent:
                        self._schedule(bar)
                    else:
                        _replay(self.replay, bar)
            finally:
                if bar:
                    bar.close()
            outputs = {name: memory.read_tensor(name) for name in self.program.outputs}
        assert self.profile is not None
        return RunResult(outputs, replace(self.profile))

    def _schedule(self, bar: ProgressBar | None) -> None:
        observer = Checker(self.program, self.target, self.memory) if self.checks == "full" else None
        if self.labels is not None:
            # how many instructions a run with loops executes is known only at its end: no fraction shown
            progress = (lambda done, _total: bar(done, None)) if bar else None
            control = ControlScheduler(self.ops, self.target, self.memory, self.labels, observer, progress)
            timeline = control.run()
            self.profile = build_profile(self.program, self.target, control.dynamic, timeline)
            self.replay = control.executed
            return
        scheduler = Scheduler(self.ops, self.target, observer, _half(bar, 0) if bar else None)
        timeline = scheduler.run()
        if scheduler.defer:  # the numerics in the order the schedule ran them
            _replay(scheduler.executed, _half(bar, len(self.ops)) if bar else None)
        self.profile = build_profile(self.program, self.target, self.ops, timeline)
        self.replay = scheduler.executed

    @property
    def instructions(self) -> int:
        return len(self.ops)


def _half(bar: ProgressBar, before: int) -> Callable[[int, int | None], None]:
    """Progress of one of two passes over the instructions (a schedule, then its numerics) as half the bar."""
    return lambda done, total: bar(before + done, None if total is None else 2 * total)


def _replay(runners: list[Callable[[], None]], bar: Callable[[int, int | None], None] | None) -> None:
    if bar is None:
        for run in runners:
            run()
        return
    total = len(runners)
    for start in range(0, total, 1024):
        for run in runners[start:start + 1024]:
            run()
        bar(min(start + 1024, total), total)


def run_program(program: Program, inputs: Mapping[str, np.ndarray], *, target: Target | None = None,
                check: bool = False, progress: bool = False, checks: str | None = None) -> RunResult:
    """Run ``program`` on ``inputs`` (by input tensor name).

    ``checks``: ``"rules"`` (the default) checks every machine rule when the program is decoded,
    before anything runs (RuleViolation); ``"full"`` (or ``check=True``) also detects reads of
    never-written memory (UninitializedReadError) and unordered conflicting accesses of two
    engines/queues (RaceError); ``"off"`` skips the rule checks for speed (results and timing
    are the same for a valid program). A stuck program raises DeadlockError.
    To run one program several times, decode it once: ``Emulator(program).run(inputs)``.
    """
    return Emulator(program, target, checks=checks_level(check, checks)).run(inputs, progress=progress)
