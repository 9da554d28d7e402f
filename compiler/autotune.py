"""`neuronc compile --autotune`: the tiling and buffering of each distinct GEMM/conv shape, chosen on the
emulator's timing.

1. Survey: one compile in this process lists the distinct kernel shapes (backend.registry.KernelShape) the
   tile policy is asked about.
2. Shapes already in the tuning store (the compile cache folder, `autotune/choices.json`) keep their
   choice. For every other shape, each candidate of CANDIDATES (the default tiling with one choice
   changed) is compiled and emulated as a whole program, with the other shapes at their current choice:
   the kernel is timed in its real context (residency, overlap with its neighbours). The candidates run in
   parallel on the sweep's executor (local process pool or Ray), as sweep points.
3. Per shape the fastest candidate wins if it beats the default by more than MIN_GAIN; the winners
   together are measured once more; should they interfere (the combination slower than the best single
   winner), only the best single winner is kept. The store remembers the winners (and that a shape's
   default was best), the dump's autotune.txt lists every candidate with its time and why the choice won.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from backend.registry import TILE_FIELDS, TILE_POLICIES, KernelShape, default_tile_policy
from compiler.cache import default_root
from compiler.driver import compile as compile_model
from compiler.errors import NeuroncError
from compiler.model_files import load_model_file
from compiler.options import CompileOptions
from compiler.sweep.cli import make_executor
from compiler.sweep.executors import Executor
from compiler.sweep.grid import ModelSpec, PluginSpec, typed_value
from compiler.sweep.progress import Progress

NOT_SHIPPED = ("dump_dir", "dump_pass_re", "timing", "plugins", "tile_overrides", "tile_policy", "time_passes",
               "quiet", "weights")
STORE_VERSION = 1
MIN_GAIN = 0.002  # a candidate must beat the default by 0.2% of the program's time to be chosen
SURVEY_POLICY = "autotune-survey"

# The default tiling (backend/options.py) with one choice changed: tile sizes, buffering, and the split of
# PSUM's 8 banks between accumulators and PE transposes (more accumulators: more stationary blocks share
# one pass over a streamed moving operand, dot.py's _blocking).
CANDIDATES: dict[str, tuple[dict[str, int], ...]] = {
    "dot": ({"moving_tile": 256}, {"moving_tile": 128}, {"group_banks": 1}, {"group_banks": 2},
            {"max_stationary_blocks": 1}, {"max_stationary_blocks": 2}, {"max_stationary_blocks": 8},
            {"stationary_buffers": 3}, {"moving_buffers": 3}, {"output_buffers": 8},
            {"moving_resident_bytes": 0}, {"transpose_chunk": 256},
            {"psum_acc_banks": 6, "psum_transpose_banks": 2, "max_stationary_blocks": 8},
            {"psum_acc_banks": 7, "psum_transpose_banks": 1, "max_stationary_blocks": 8},
            {"psum_acc_banks": 8, "psum_transpose_banks": 1, "max_stationary_blocks": 8}),
    "conv": ({"moving_tile": 256}, {"moving_tile": 128}, {"psum_acc_banks": 2}, {"output_buffers": 2},
             {"output_buffers": 8}),
}


class AutotuneError(NeuroncError):
    """The autotuner could not measure the model (its default compile fails) or its store is unreadable."""


class TuningStore:
    """Best tile choices per (shape, context), a JSON file under the cache folder (no pickle)."""

    def __init__(self, path: Path | None = None):
        self.path = path or default_root() / "autotune" / "choices.json"  # beside the compile cache's entries
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise AutotuneError(f"{self.path}: unreadable tuning store ({e}); delete it to start afresh") from None
            if data.get("version") == STORE_VERSION:
                self.entries = data.get("entries", {})

    @staticmethod
    def key(shape: str, context: dict[str, str]) -> str:
        return shape + "|" + ",".join(f"{k}={v}" for k, v in sorted(context.items()))

    def get(self, shape: str, context: dict[str, str]) -> dict[str, Any] | None:
        return self.entries.get(self.key(shape, context))

    def put(self, shape: str, context: dict[str, str], entry: dict[str, Any]) -> None:
        self.entries[self.key(shape, context)] = entry

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": STORE_VERSION, "entries": self.entries}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


@dataclass
class Trial:
    shape: str  # "" for a whole-program measurement (default, combined)
    choice: dict[str, int]
    sim_us: float | None
    error: str = ""
    max_rel_err: float = 0.0


@dataclass
class AutotuneResult:
    shapes: list[str]
    baseline_us: float
    tuned_us: float
    overrides: dict[str, dict[str, int]]  # shape -> chosen fields (default-best shapes absent)
    reasons: dict[str, str] = field(default_factory=dict)
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def gain(self) -> float:
        return self.baseline_us / self.tuned_us if self.tuned_us else 1.0

    def overrides_json(self) -> str:
        return json.dumps(self.overrides, sort_keys=True)

    def report(self) -> str:
        lines = [f"# autotune: {len(self.shapes)} GEMM/conv shapes, {len(self.trials)} programs emulated in "
                 f"{self.seconds:.1f} s",
                 f"default tiling {self.baseline_us:.3f} us -> tuned {self.tuned_us:.3f} us ({self.gain:.3f}x)"]
        for t in self.trials:
            if t.choice == {"combined": 1}:
                together = f"{t.sim_us:.3f} us" if t.sim_us is not None else f"failed: {t.error}"
                lines.append(f"every shape's winner together: {together}")
        lines.append("")
        for shape in self.shapes:
            chosen = self.overrides.get(shape)
            lines.append(f"{shape}: {_fmt(chosen) if chosen else 'default'}: {self.reasons.get(shape, '')}")
            for t in self.trials:
                if t.shape == shape:
                    result = f"{t.sim_us:.3f} us" if t.sim_us is not None else f"failed: {t.error}"
                    lines.append(f"    {_fmt(t.choice):<32} {result}")
        return "\n".join(lines) + "\n"


def _fmt(choice: dict[str, int] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((choice or {}).items())) or "default"


def survey_shapes(model_file: str, options: dict[str, Any], entry: str = "get_model") -> list[str]:
    """The distinct GEMM/conv kernel shapes of the model, in the order the backend meets them."""
    seen: dict[str, None] = {}

    def record(shape: KernelShape, opts: Any) -> Any:
        seen.setdefault(shape.key)
        return default_tile_policy(shape, opts)

    model, inputs, call_kwargs = load_model_file(model_file, entry)
    with TILE_POLICIES.scoped():
        TILE_POLICIES.register(SURVEY_POLICY, record, origin="the autotuner")
        compile_model(model, inputs, example_kwargs=call_kwargs,
                      **{**options, "tile_policy": SURVEY_POLICY, "cache": False, "quiet": True})
    return list(seen)


def autotune(model_file: str, options: dict[str, str], executor: Executor, store: TuningStore | None = None,
             entry: str = "get_model", stream: TextIO | None = None, retune: bool = False,
             plugins: list[PluginSpec] | None = None,
             candidates: dict[str, tuple[dict[str, int], ...]] | None = None) -> AutotuneResult:
    """Tune every GEMM/conv shape of the model file (`options`: the other compile options, as text) over
    `candidates` (default CANDIDATES) per kernel kind."""
    candidates = CANDIDATES if candidates is None else candidates
    start = time.monotonic()
    stream = stream or sys.stderr
    store = store or TuningStore()
    spec = ModelSpec.from_file(model_file, entry)
    typed = {k: typed_value(v) for k, v in options.items()}
    shapes = survey_shapes(model_file, typed, entry)
    context = {k: str(v) for k, v in options.items() if k not in ("dump_dir", "dump_pass_re", "timing")}
    current: dict[str, dict[str, int]] = {}
    reasons: dict[str, str] = {}
    todo = []
    for shape in shapes:
        known = None if retune else store.get(shape, context)
        if known is not None:
            if known["choice"]:
                current[shape] = known["choice"]
            reasons[shape] = f"from the tuning store ({known.get('why', '')})"
        else:
            todo.append(shape)
    jobs: list[tuple[str, dict[str, int]]] = [("", {})]
    for shape in todo:
        kind = shape.split(":")[0]
        jobs += [(shape, dict(c)) for c in candidates.get(kind, ())]
    stream.write(f"autotune: {len(shapes)} GEMM/conv shapes ({len(shapes) - len(todo)} from the tuning store), "
                 f"{len(jobs)} programs to emulate on {executor.name} ({executor.workers} workers)\n")
    shipped = [p.to_json() for p in plugins or []]
    trials = _measure(spec, options, current, jobs, executor, stream, shipped)
    baseline = trials[0]
    if baseline.sim_us is None:
        raise AutotuneError(f"{model_file}: the default compile failed, nothing to tune: {baseline.error}")
    # a tiling is only as good as its results: one whose outputs drift from torch eager by more than the
    # default's error (x2, + 1e-4) is wrong, whatever its time (e.g. stationary_buffers=1 before it was refused)
    limit = 2 * baseline.max_rel_err + 1e-4
    for t in trials[1:]:
        if t.sim_us is not None and t.max_rel_err > limit:
            t.sim_us, t.error = None, f"wrong results: max_rel_err {t.max_rel_err:.2e} > {limit:.2e}"
    winners: dict[str, tuple[dict[str, int], float]] = {}
    for shape in todo:
        mine = [t for t in trials if t.shape == shape and t.sim_us is not None]
        best = min(mine, key=lambda t: t.sim_us, default=None)
        if best is not None and best.sim_us < baseline.sim_us * (1 - MIN_GAIN):
            winners[shape] = (best.choice, best.sim_us)
            reasons[shape] = (f"{best.sim_us:.3f} us against {baseline.sim_us:.3f} us with the default "
                              f"({baseline.sim_us / best.sim_us:.3f}x), the fastest of {len(mine) + 1} tilings")
        else:
            reasons[shape] = (f"the default is fastest ({baseline.sim_us:.3f} us; best other "
                              f"{best.sim_us:.3f} us)" if best else "every other tiling failed")
    tuned = {**current, **{s: c for s, (c, _) in winners.items()}}
    tuned_us = baseline.sim_us
    if winners:
        combined = _measure(spec, options, tuned, [("", {})], executor, stream, shipped)[0]
        single_shape, (single_choice, single_us) = min(winners.items(), key=lambda kv: kv[1][1])
        if combined.sim_us is not None and combined.sim_us <= single_us and combined.max_rel_err <= limit:
            tuned_us = combined.sim_us
        else:  # the winners interfere: keep the best one alone
            for shape in winners:
                if shape != single_shape:
                    reasons[shape] += "; dropped: together with the others it was slower"
            tuned = {**current, single_shape: single_choice}
            tuned_us = single_us
        trials.append(Trial("", {"combined": 1}, combined.sim_us, combined.error))
    for shape in todo:
        store.put(shape, context, {"choice": tuned.get(shape, {}), "why": reasons[shape], "model": spec.name})
    store.save()
    return AutotuneResult(shapes, baseline.sim_us, tuned_us, tuned, reasons, trials, time.monotonic() - start)


def _measure(spec: ModelSpec, options: dict[str, str], current: dict[str, dict[str, int]],
             jobs: list[tuple[str, dict[str, int]]], executor: Executor, stream: TextIO,
             plugins: list[dict[str, str]]) -> list[Trial]:
    tasks = []
    for shape, choice in jobs:
        overrides = {**current, shape: choice} if shape else dict(current)
        for name in choice:
            if name not in TILE_FIELDS:
                raise AutotuneError(f"candidate field {name!r} is not a tile field")
        tasks.append(json.dumps({"model": spec.to_json(), "fixed": dict(options), "plugins": plugins, "timeout_s": None,
                                 "options": {"tile_overrides": json.dumps(overrides, sort_keys=True)}},
                                sort_keys=True))
    trials: list[Trial | None] = [None] * len(jobs)
    progress = Progress(len(jobs), stream=stream)
    for index, row in executor.run(tasks):
        ok = row.get("status") == "ok"
        shape, choice = jobs[index]
        trials[index] = Trial(shape, choice, float(row["sim_us"]) if ok else None, "" if ok else row.get("error", ""),
                              float(row["max_rel_err"]) if ok else 0.0)
        progress.update(ok, f"{shape or 'program'} {_fmt(choice)}: {row['sim_us'] + ' us' if ok else row['status']}")
    progress.close()
    return [t for t in trials if t is not None]


def option_text(options: CompileOptions) -> dict[str, str]:
    """The options a trial shares with the compile being tuned, as text (the non-default ones)."""
    text = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name in NOT_SHIPPED or value == f.default:
            continue
        text[f.name] = json.dumps(list(value)) if isinstance(value, tuple) else str(value)
    return text


def autotune_options(model_file: str, options: CompileOptions, entry: str = "get_model", workers: int | None = None,
                     ray_address: str | None = None, retune: bool = False,
                     stream: TextIO | None = None) -> CompileOptions:
    """`neuronc compile --autotune`: tune the model file's shapes, write autotune.txt in the dump folder and
    return the options with the chosen tile_overrides."""
    stream = stream or sys.stderr
    if not model_file.endswith(".py"):
        raise AutotuneError(f"--autotune takes a .py model file (its trials run in worker processes), got {model_file}")
    executor = make_executor(workers, ray_address)
    result = autotune(model_file, option_text(options), executor, entry=entry, stream=stream, retune=retune,
                      plugins=[PluginSpec.from_file(p) for p in options.plugins])
    stream.write(f"autotune: {result.baseline_us:.3f} us with the default tiling -> {result.tuned_us:.3f} us "
                 f"({result.gain:.3f}x), {len(result.overrides)} of {len(result.shapes)} shapes changed\n")
    if options.dump_dir:
        folder = Path(options.dump_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "autotune.txt").write_text(result.report())
    return options.replace(tile_overrides=result.overrides_json())
