"""The Ray executor: every point is a Ray task (`pip install neuronc[cluster]`).

`RayExecutor()` starts a local Ray instance on this machine's cores and stops it at the end;
`RayExecutor("ray://host:10001")` (or `"auto"`, or a GCS address) joins an existing cluster. The project's
packages ship with the job (`runtime_env.py_modules`) when joining a cluster, and model and plug-in files
travel inside each task's JSON, so the cluster's workers need neither a checkout nor a shared disk.
Results stream back as tasks finish (`ray.wait`). A task whose worker dies is retried once by Ray
(`max_retries=1`); a second death gives the point a `crashed` row, as in the local pool.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compiler.lazy import lazy_import
from compiler.sweep.executors import MAX_ATTEMPTS, Executor, default_workers, failure_row
from compiler.sweep.grid import SweepError

point = lazy_import("compiler.sweep.point")  # imports torch and the compiler: loaded when a point runs

ray: Any = None  # imported when a RayExecutor is made: an optional dependency, and slow to import


def _import_ray() -> Any:
    global ray
    if ray is None:
        try:
            ray = importlib.import_module("ray")
        except ImportError:
            raise SweepError("--ray needs the ray package: pip install 'neuronc[cluster]'") from None
    return ray

# The project's top-level packages: what a remote worker must import to run a point.
PROJECT_PACKAGES = ("isa", "hlo", "frontend", "backend", "compiler")


def _ray_task(task_json: str) -> str:
    return point.run_task(task_json)


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        _import_ray()
        self.address = address
        self._workers = workers or default_workers()

    @property
    def workers(self) -> int:
        if ray is not None and ray.is_initialized() and self.address:
            return int(ray.cluster_resources().get("CPU", self._workers))
        return self._workers

    def _runtime_env(self) -> dict:
        env: dict = {"env_vars": dict(point.THREAD_ENV)}
        root = Path(__file__).resolve().parents[2]
        if self.address:  # a cluster elsewhere: ship the code
            env["py_modules"] = [str(root / name) for name in PROJECT_PACKAGES if (root / name).is_dir()]
        else:  # workers of a local instance import the same checkout
            env["env_vars"]["PYTHONPATH"] = str(root)
        return env

    def run(self, tasks: list[str]) -> Iterator[tuple[int, dict[str, str]]]:
        started_here = not ray.is_initialized()
        if started_here:
            kwargs: dict = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
                            "runtime_env": self._runtime_env()}
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=self._workers, **kwargs)
        try:
            yield from self._stream(tasks)
        finally:
            if started_here:
                ray.shutdown()

    def _stream(self, tasks: list[str]) -> Iterator[tuple[int, dict[str, str]]]:
        remote = ray.remote(num_cpus=1, max_retries=MAX_ATTEMPTS - 1, retry_exceptions=False)(_ray_task)
        refs = {remote.remote(task): i for i, task in enumerate(tasks)}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                index = refs.pop(ref)
                try:
                    row = json.loads(ray.get(ref))
                except ray.exceptions.RayError as e:
                    row = failure_row(tasks[index], "crashed",
                                      f"the Ray task failed twice: {type(e).__name__}: {_first_line(e)}")
                yield index, row


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:300]
