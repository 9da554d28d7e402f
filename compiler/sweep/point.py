"""Run one point of a sweep in a worker: compile, emulate with timing, compare with torch eager.

`run_task` takes and returns JSON text, the only thing that crosses a process or a Ray boundary (no pickle
of project objects), and is the same function for the local pool and for Ray tasks, so both give the same
row. It never raises for a bad point: a compiler or emulator error becomes `status=failed` with the error.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from compiler.driver import compile as compile_model
from compiler.model_files import load_model_file
from compiler.sweep.grid import typed_value
from compiler.sweep.results import METRICS

# Deterministic numerics wherever the worker runs: one BLAS/OpenMP thread (set before torch loads).
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_models: dict[tuple[str, str], tuple[Any, tuple, dict[str, Any], list[np.ndarray]]] = {}


class PointTimeout(Exception):
    """The point ran past the sweep's --timeout."""


def run_task(task_json: str) -> str:
    """The results.csv row of one point (JSON object of strings) for a task made by Sweep.task.

    With `timeout_s` in the task, an alarm stops the point after that many seconds (status `timeout`);
    workers run tasks on their main thread, where the alarm's signal arrives (local pool and Ray alike).
    """
    task = json.loads(task_json)
    row = {"model": task["model"]["name"], **task["options"], **{m: "" for m in METRICS}}
    timeout = task.get("timeout_s")
    previous = signal.signal(signal.SIGALRM, _alarm) if timeout else None
    try:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, float(timeout))
        row.update(_measure(task))
    except PointTimeout:
        row.update(status="timeout", error=f"stopped after {timeout:g} s (--timeout)")
    except Exception as e:  # any failure of the point is its result; the sweep goes on
        row.update(status="failed", error=one_line(e))
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return json.dumps(row, sort_keys=True)


def _alarm(signum: int, frame: Any) -> None:
    raise PointTimeout()


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:500]


def _measure(task: dict[str, Any]) -> dict[str, str]:
    torch.set_num_threads(1)
    model, inputs, call_kwargs, reference = _load_model(task["model"])
    # every point compiles (compile_s measures the compiler, not the cache) unless the sweep sets cache=true
    kwargs = {"cache": False, "quiet": True}
    kwargs.update({k: typed_value(v) for k, v in {**task["fixed"], **task["options"]}.items()})
    if task["plugins"]:
        kwargs["plugins"] = [_local_file(p, "plugin") for p in task["plugins"]]
    start = time.perf_counter()
    exe = compile_model(model, inputs, example_kwargs=call_kwargs, **kwargs)
    compile_s = time.perf_counter() - start
    outputs, prof = exe.run_with_profile(*inputs, **call_kwargs)
    return {
        "sim_us": f"{prof.time_us:.3f}",
        "mfu": f"{prof.mfu:.6f}",
        "hbm_bytes": str(int(prof.hbm_read_bytes + prof.hbm_write_bytes)),
        "peak_sbuf_bytes": str(int(prof.peak_sbuf_bytes)),
        "compile_s": f"{compile_s:.2f}",
        "max_rel_err": f"{max_rel_err(outputs, reference):.3e}",
        "instructions": str(len(exe.program.instructions)),
        "status": "ok",
        "error": "",
    }


def max_rel_err(outputs: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """max |emulated - eager| / max |eager| over all outputs (flattened in order)."""
    if len(outputs) != len(reference):
        raise ValueError(f"the program has {len(outputs)} outputs, the torch model {len(reference)}")
    worst, scale = 0.0, 0.0
    for out, ref in zip(outputs, reference, strict=True):
        got = np.asarray(out).astype(np.float64)
        want = np.asarray(ref).astype(np.float64)
        if got.size != want.size:
            raise ValueError(f"an output has {got.size} elements, the torch model's {want.size}")
        if got.size:
            worst = max(worst, float(np.max(np.abs(got.reshape(want.shape) - want))))
            scale = max(scale, float(np.max(np.abs(want))))
    return worst / max(scale, 1e-30)


def _leaves(value: Any) -> list[np.ndarray]:
    """Tensors of a nested tuple/list/dict in order, as numpy (bf16 through fp32)."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return [tensor.numpy()]
    if isinstance(value, dict):
        return [leaf for k in value for leaf in _leaves(value[k])]
    if isinstance(value, tuple | list):
        return [leaf for item in value for leaf in _leaves(item)]
    if value is None:
        return []
    return [np.asarray(value)]


def _load_model(spec: dict[str, str]) -> tuple[Any, tuple, dict[str, Any], list[np.ndarray]]:
    """(model, example inputs, example keyword inputs, torch eager outputs), once per worker process and model
    file."""
    key = (spec["sha256"], spec["entry"])
    if key not in _models:
        model, inputs, call_kwargs = load_model_file(_local_file(spec, "model"), spec["entry"])
        with torch.no_grad():
            reference = _leaves(model(*inputs, **call_kwargs))
        _models[key] = (model, inputs, call_kwargs, reference)
    return _models[key]


def _local_file(spec: dict[str, str], kind: str) -> str:
    """A path to the shipped file on this machine: its own path if the content there is the same,
    else a copy under the temp folder named by its hash (a Ray worker on another machine)."""
    path = Path(spec["path"])
    try:
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == spec["sha256"]:
            return str(path)
    except OSError:
        pass
    folder = Path(tempfile.gettempdir()) / f"neuronc-sweep-{kind}-{spec['sha256'][:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / path.name
    if not copy.exists():
        tmp = copy.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(spec["source"])
        os.replace(tmp, copy)
    return str(copy)
