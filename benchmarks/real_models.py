"""Real models at full size: every transformers example of examples/ compiled, emulated and compared with eager.

    PYTHONPATH=. python benchmarks/real_models.py                      # all examples, full size
    PYTHONPATH=. python benchmarks/real_models.py --models gpt2 bert   # some of them
    PYTHONPATH=. python benchmarks/real_models.py --depth 2            # 2 layers (blocks per stage)

Per model and per precision (fp32, and `--auto-cast matmult`): compile wall time; max rel error against torch
eager (max abs error / max abs reference, the worst output); simulated time; MFU; sim/bound, where bound =
max(FLOPs at the PE peak of the precision, compulsory HBM bytes at HBM bandwidth), both figures from the target
file (isa/targets/trn1.json: PE clock x 128 x 128 MACs, fp32 at 1/fp32_factor of it; hbm.bytes_per_ns).
Compulsory bytes are the program's inputs and outputs and the model's weights in their compute dtype (matmul and
convolution weights in bf16 under `--auto-cast matmult`), each moved once, except that an embedding table counts
only the rows gathered (unless it is also a matmul weight, tied).
FLOPs are torch's count (torch.utils.flop_counter) of the eager model. Compile s includes the garbage collection
of what the compile left (it pauses the collector). Emulate s is the emulator's wall time of the first run
(decode and a scheduled run, as `exe.run` costs once per process), replay s the median of two later
runs (the decoded program replayed), eager s torch's median of three forward passes (CPU, fp32, after a warm-up;
torch's default threads unless OMP_NUM_THREADS/`--threads` say otherwise), emu/eager the two ratios
(first and replayed), in wall time and in CPU time (time.process_time: the fair figure on a busy machine,
where --threads 1 puts torch on one thread as the emulator is), with their geometric means under the table.
A model that fails is reported with its error and the table goes on.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
from compiler.model_files import load_model_file  # noqa: E402
from frontend.signature import register_model_pytrees  # noqa: E402
from isa.target import load_target  # noqa: E402

EXAMPLES = ("gpt2", "bert", "llama", "t5_encoder", "vit", "resnet50", "convnext")
CASTS = ("none", "matmult")


@dataclass
class Run:
    """One compilation of a model (one auto-cast setting) and its emulation."""

    status: str = "ok"
    compile_s: float = float("nan")
    rel_err: float = float("nan")
    sim_us: float = float("nan")
    mfu: float = float("nan")
    sim_over_bound: float = float("nan")
    bound: str = ""
    bound_us: float = float("nan")
    emulate_s: float = float("nan")
    replay_s: float = float("nan")
    emulate_cpu: float = float("nan")  # CPU seconds (time.process_time) of the same runs
    replay_cpu: float = float("nan")


@dataclass
class Row:
    model: str
    params_m: float = float("nan")
    gflop: float = float("nan")
    eager_s: float = float("nan")
    eager_cpu: float = float("nan")
    runs: dict[str, Run] = field(default_factory=dict)


def load_example(name: str) -> tuple[torch.nn.Module, tuple, dict]:
    """examples/<name>.py's (or a path's) get_model() as (model, args, kwargs)."""
    path = Path(name) if name.endswith(".py") else ROOT / "examples" / f"{name}.py"
    return load_model_file(str(path))


def leaves(value: Any) -> list[np.ndarray]:
    """The tensors of a model output (ModelOutput, tuple, cache, ...) as fp32 numpy arrays, in pytree order."""
    return [t.detach().float().numpy() for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def rel_error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """The worst output's max abs error over its max abs reference."""
    if len(actual) != len(expected):
        raise ValueError(f"{len(actual)} outputs, eager gives {len(expected)}")
    worst = 0.0
    for a, e in zip(actual, expected, strict=True):
        a = np.asarray(a, dtype=np.float32).reshape(e.shape)
        scale = float(np.max(np.abs(e))) or 1.0
        worst = max(worst, float(np.max(np.abs(a - e))) / scale)
    return worst


def _matmul_weights(model: torch.nn.Module) -> set[int]:
    """ids of the weights that matmuls and convolutions read (bf16 under `--auto-cast matmult`)."""
    ids = {id(m.weight) for m in model.modules()
           if isinstance(m, torch.nn.Linear | torch.nn.Conv1d | torch.nn.Conv2d | torch.nn.Conv3d)}
    # transformers' Conv1D (GPT-2) keeps its weight as a parameter named weight too
    return ids | {id(m.weight) for m in model.modules() if type(m).__name__ == "Conv1D" and hasattr(m, "weight")}


def embedding_savings(model: torch.nn.Module, args: tuple, kwargs: dict) -> dict[int, int]:
    """Rows gathered, by id of the table, of every embedding whose table is not also a matmul weight (tied)."""
    weights = _matmul_weights(model)
    found: dict[int, int] = {}
    hooks = []
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and id(m.weight) not in weights:
            hooks.append(m.register_forward_hook(lambda mod, inp, out: found.__setitem__(
                id(mod.weight), found.get(id(mod.weight), 0) + int(torch.unique(inp[0]).numel()))))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    return found


def weight_bytes(model: torch.nn.Module, cast: str, savings: dict[int, int]) -> int:
    """The model's parameters and floating-point buffers, each once, in the dtype the compiled program computes
    with (matmul and convolution weights in bf16 under `--auto-cast matmult`, everything else as stored); an
    embedding table that is not a matmul weight counts only the rows gathered."""
    matmul = _matmul_weights(model) if cast == "matmult" else set()
    tensors = {id(t): t for t in model.parameters()}
    tensors.update({id(t): t for t in model.buffers() if t.is_floating_point()})
    total = 0
    for key, t in tensors.items():
        size = 2 if key in matmul else t.element_size()
        rows = min(savings.get(key, t.shape[0] if t.dim() else 1), t.shape[0] if t.dim() else 1)
        total += t.numel() // max(1, t.shape[0] if t.dim() else 1) * rows * size
    return total


def compulsory_bytes(program: Any, model: torch.nn.Module, cast: str, savings: dict[int, int]) -> int:
    """Inputs and outputs of the compiled program, plus the weights (weight_bytes), each moved once.
    (Not the program's constants: those hold the weights as their kernels read them, zero-padded
    block-diagonal banks of grouped convolutions included, which are not compulsory bytes.)"""
    io = sum(t.nbytes for t in program.tensors.values() if t.kind in ("input", "output"))
    return io + weight_bytes(model, cast, savings)


def run_once(model: torch.nn.Module, args: tuple, kwargs: dict, cast: str, expected: list[np.ndarray],
             flops: float, savings: dict[int, int], target: Any) -> Run:
    run = Run()
    try:
        start = time.perf_counter()
        exe = compiler.compile(model, args, example_kwargs=kwargs, auto_cast=cast, cache=False, quiet=True)
        # the compile's objects are young (it pauses the collector): their first scan (GPT-2: ~1.4 CPU s) is the
        # compile's cost, and would otherwise land in whatever allocates next, the emulator's first run
        gc.collect()
        run.compile_s = time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        outputs, prof = exe.run_with_profile(*args, **kwargs)
        run.emulate_s, run.emulate_cpu = time.perf_counter() - start, time.process_time() - cpu
        replays = []
        for _ in range(2):
            start, cpu = time.perf_counter(), time.process_time()
            exe.run(*args, **kwargs)
            replays.append((time.perf_counter() - start, time.process_time() - cpu))
        run.replay_s, run.replay_cpu = (float(np.median(column)) for column in zip(*replays, strict=True))
        run.rel_err = rel_error([np.asarray(r, dtype=np.float32) for r in outputs], expected)
        run.sim_us, run.mfu = prof.time_us, prof.mfu
        peak = target.pe_peak_flops_bf16  # FLOP/s
        if cast == "none":
            peak /= target.data["pe"]["fp32_factor"]
        hbm_us = compulsory_bytes(exe.program, model, cast, savings) / (target.data["hbm"]["bytes_per_ns"] * 1e3)
        pe_us = flops / peak * 1e6
        run.bound = "pe" if pe_us >= hbm_us else "hbm"
        run.bound_us = max(pe_us, hbm_us)
        run.sim_over_bound = prof.time_us / max(pe_us, hbm_us)
    except Exception as e:  # report and go on: the table lists every model, whatever its status
        run.status = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        if os.environ.get("NEURONC_BENCH_TRACE"):
            traceback.print_exc()
    return run


def bench(name: str, casts: tuple[str, ...], target: Any) -> Row:
    row = Row(name)
    try:
        model, args, kwargs = load_example(name)
    except Exception as e:
        row.runs = {c: Run(status=f"load failed: {type(e).__name__}: {e}") for c in casts}
        return row
    register_model_pytrees(model)
    row.params_m = sum(p.numel() for p in model.parameters()) / 1e6
    with torch.no_grad():
        model(*args, **kwargs)  # warm-up
        times = []
        for _ in range(3):
            start, cpu = time.perf_counter(), time.process_time()
            out = model(*args, **kwargs)
            times.append((time.perf_counter() - start, time.process_time() - cpu))
        row.eager_s, row.eager_cpu = (float(np.median(column)) for column in zip(*times, strict=True))
        counter = FlopCounterMode(display=False)
        with counter:
            model(*args, **kwargs)
    row.gflop = counter.get_total_flops() / 1e9
    expected = leaves(out)
    savings = embedding_savings(model, args, kwargs)
    for cast in casts:
        row.runs[cast] = run_once(model, args, kwargs, cast, expected, row.gflop * 1e9, savings, target)
        print(f"  {name} {cast}: {row.runs[cast]}", file=sys.stderr, flush=True)
    return row


def _f(value: float, fmt: str) -> str:
    return "-" if value != value else format(value, fmt)


def table(rows: list[Row], casts: tuple[str, ...]) -> str:
    head = ["model", "params M", "GFLOP", "eager s"]
    for cast in casts:
        tag = "fp32" if cast == "none" else cast
        head += [f"compile s ({tag})", f"rel err ({tag})", f"sim us ({tag})", f"MFU ({tag})",
                 f"sim/bound ({tag})", f"emulate s ({tag})", f"replay s ({tag})", f"emu/eager first, replay ({tag})",
                 f"CPU: emu/eager first, replay ({tag})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for r in rows:
        cells = [r.model, _f(r.params_m, ".1f"), _f(r.gflop, ".1f"), _f(r.eager_s, ".2f")]
        for cast in casts:
            run = r.runs.get(cast, Run(status="not run"))
            bound = f"{_f(run.sim_over_bound, '.2f')} ({run.bound})" if run.bound else "-"
            cells += [_f(run.compile_s, ".1f"), _f(run.rel_err, ".1e"), _f(run.sim_us, ".0f"),
                      _f(run.mfu * 100, ".1f") + ("%" if run.mfu == run.mfu else ""), bound,
                      _f(run.emulate_s, ".1f"), _f(run.replay_s, ".2f"),
                      f"{_f(run.emulate_s / r.eager_s, '.1f')}x, {_f(run.replay_s / r.eager_s, '.1f')}x",
                      f"{_f(run.emulate_cpu / r.eager_cpu, '.1f')}x, {_f(run.replay_cpu / r.eager_cpu, '.1f')}x"]
            if run.status != "ok":
                notes.append(f"- {r.model} ({'fp32' if cast == 'none' else cast}): {run.status}")
        lines.append("| " + " | ".join(cells) + " |")
    for cast in casts:
        ok = [(r, r.runs[cast]) for r in rows if cast in r.runs and r.runs[cast].status == "ok"]
        if ok:
            wall = [geomean([run.emulate_s / r.eager_s for r, run in ok]),
                    geomean([run.replay_s / r.eager_s for r, run in ok])]
            cpu = [geomean([run.emulate_cpu / r.eager_cpu for r, run in ok]),
                   geomean([run.replay_cpu / r.eager_cpu for r, run in ok])]
            notes.insert(0, f"emulation / eager ({'fp32' if cast == 'none' else cast}), geometric mean over "
                            f"{len(ok)} models: wall: first run {wall[0]:.2f}x, replayed {wall[1]:.2f}x; "
                            f"CPU: first run {cpu[0]:.2f}x, replayed {cpu[1]:.2f}x")
    return "\n".join(lines + ([""] + notes if notes else []))


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(EXAMPLES), choices=EXAMPLES)
    parser.add_argument("--depth", type=int, default=None, help="layers (blocks per stage) instead of the full depth")
    parser.add_argument("--casts", nargs="+", default=list(CASTS), choices=CASTS)
    parser.add_argument("--target", default="trn1")
    parser.add_argument("--threads", type=int, default=None, help="torch's intra-op threads (default: torch's)")
    opts = parser.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.depth is not None:
        os.environ["NEURONC_EXAMPLE_LAYERS"] = str(opts.depth)
    target = load_target(opts.target)
    casts = tuple(opts.casts)
    rows = []
    for name in opts.models:
        print(f"{name} ...", file=sys.stderr, flush=True)
        rows.append(bench(name, casts, target))
    print(table(rows, casts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
