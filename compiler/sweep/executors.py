"""Where the points run: the Executor interface and the local process pool.

An executor takes the JSON tasks of the points to run and yields `(index, row)` as each finishes, in any
order. Both executors run `compiler.sweep.point.run_task`, so they give the same rows. A worker that dies
while running a point (a segfault, the OOM killer, `os._exit` in a model file) costs that point one retry
on a fresh worker; if it dies again the point's row says `crashed`. (A point running longer than its
timeout stops itself: see point.run_task.)
"""

from __future__ import annotations

import json
import multiprocessing
import os
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from compiler.lazy import lazy_import
from compiler.sweep.results import METRICS

point = lazy_import("compiler.sweep.point")  # imports torch and the compiler: loaded when a point runs

MAX_ATTEMPTS = 2  # a crashed worker's point is retried once


class Executor(ABC):
    """Runs tasks (JSON text of Sweep.task) and yields (task index, row dict) as they finish."""

    name = "executor"

    @abstractmethod
    def run(self, tasks: list[str]) -> Iterator[tuple[int, dict[str, str]]]:
        """Run every task; yield (its index, its results row) as each finishes."""

    @property
    @abstractmethod
    def workers(self) -> int:
        """How many tasks run at once."""


def failure_row(task_json: str, status: str, error: str) -> dict[str, str]:
    """The row of a point that produced none (its worker crashed twice or it timed out)."""
    task = json.loads(task_json)
    return {"model": task["model"]["name"], **task["options"], **{m: "" for m in METRICS}, "status": status,
            "error": error}


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _worker_main(conn: Connection) -> None:
    """A worker process: run the tasks it receives until the driver closes the pipe."""
    while True:
        try:
            task = conn.recv_bytes().decode()
        except (EOFError, OSError):
            return
        result = point.run_task(task)
        try:
            conn.send_bytes(result.encode())
        except (BrokenPipeError, OSError):
            return


@contextmanager
def _thread_env() -> Iterator[None]:
    """The workers' environment: one BLAS thread each (spawned children copy os.environ)."""
    saved = {k: os.environ.get(k) for k in point.THREAD_ENV}
    os.environ.update(point.THREAD_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class _Slot:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    task: int | None = None


class LocalExecutor(Executor):
    """A pool of spawned worker processes on this machine (one per core by default)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self._workers = workers or default_workers()
        self._context = multiprocessing.get_context("spawn")

    @property
    def workers(self) -> int:
        return self._workers

    def _start(self) -> _Slot:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_main, args=(child,), daemon=True, name="neuronc-sweep")
        with _thread_env():
            process.start()
        child.close()
        return _Slot(process, parent)

    def run(self, tasks: list[str]) -> Iterator[tuple[int, dict[str, str]]]:
        pending = deque(range(len(tasks)))
        attempts = [0] * len(tasks)
        slots: list[_Slot] = []
        try:
            while pending or any(s.task is not None for s in slots):
                while pending and len(slots) < self._workers:
                    slots.append(self._start())
                for slot in slots:
                    if slot.task is None and pending:
                        slot.task = pending.popleft()
                        attempts[slot.task] += 1
                        slot.conn.send_bytes(tasks[slot.task].encode())
                busy = [s for s in slots if s.task is not None]
                wait([s.conn for s in busy] + [s.process.sentinel for s in busy])
                for slot in busy:
                    index = slot.task
                    assert index is not None
                    if slot.conn.poll():
                        try:
                            row = json.loads(slot.conn.recv_bytes().decode())
                        except (EOFError, OSError):
                            row = None
                        if row is not None:
                            slot.task = None
                            yield index, row
                            continue
                    if not slot.process.is_alive():
                        slots.remove(slot)
                        slot.conn.close()
                        code = slot.process.exitcode
                        if attempts[index] < MAX_ATTEMPTS:
                            pending.appendleft(index)
                        else:
                            yield index, failure_row(tasks[index], "crashed",
                                                     f"the worker died twice running this point (exit code {code})")
        finally:
            for slot in slots:
                _stop(slot)


def _stop(slot: _Slot) -> None:
    """End a worker: an idle one exits when its pipe closes; one still running a point is killed."""
    slot.conn.close()
    if slot.task is None:
        slot.process.join(timeout=10)
    if slot.process.is_alive():
        slot.process.kill()
    slot.process.join(timeout=5)
