"""The performance suite: compile every model of benchmarks/models.py, emulate it, compare with the bounds.

    .venv/bin/python benchmarks/run.py                       # the suite -> out/bench/suite.csv (+ .md)
    .venv/bin/python benchmarks/run.py --models gemm4096     # some models only
    .venv/bin/python benchmarks/run.py --compare             # fusion none/greedy/cost x scheduler

Per model: simulated time and MFU; roofline efficiency = max(matmul FLOPs at PE peak, compulsory HBM
bytes at HBM bandwidth) / simulated time, where compulsory bytes are the program's inputs, constants
(weights, in their compiled dtype) and outputs, each moved once; HBM traffic and peak SBUF; compile
wall time (capture included); emulator wall time next to torch eager CPU time (fp32, best of 3).
One model's timeline is also written as a PNG and a Perfetto trace. A model the compiler cannot
compile yet is reported as "not supported yet: <error>" and the suite goes on.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from benchmarks.models import Case, by_name  # noqa: E402
from benchmarks.timeline import plot_timeline  # noqa: E402
from compiler.driver import Executable, to_numpy  # noqa: E402
from compiler.errors import NeuroncError  # noqa: E402
from isa.emulator import Profile, run_program  # noqa: E402
from isa.target import load_target  # noqa: E402

FUSIONS = ("none", "greedy", "cost")
SCHEDULERS = ("inorder", "ready_time", "list")  # ready_time: the first list scheduler (backend only)


@dataclass
class Result:
    model: str
    status: str = "ok"
    sim_us: float = float("nan")
    mfu: float = float("nan")
    roofline_eff: float = float("nan")
    roofline_us: float = float("nan")
    bound: str = ""  # what the roofline is: "pe" or "hbm"
    matmul_gflop: float = float("nan")
    compulsory_mib: float = float("nan")
    hbm_traffic_mib: float = float("nan")
    peak_sbuf_mib: float = float("nan")
    compile_s: float = float("nan")
    emulate_s: float = float("nan")
    eager_s: float = float("nan")
    emulate_over_eager: float = float("nan")
    max_rel_err: float = float("nan")
    instructions: int = 0
    estimate_us: float = float("nan")  # the scheduler's own estimate of the simulated time
    busy: dict[str, float] = field(default_factory=dict)
    stalls: str = ""  # the largest semaphore stalls, "engine<-source us"
    fusion: str = "greedy"
    scheduler: str = "list"


@contextmanager
def backend_scheduler(mode: str) -> Iterator[None]:
    """Compile with the backend's scheduler `mode`. The driver exposes list|inorder; the first list
    scheduler ("ready_time") is reached by wrapping backend.api.schedule for the comparison only."""
    if mode in ("list", "inorder"):
        yield
        return
    import backend.api as api

    original = api.schedule
    api.schedule = lambda ops, costs, untracked, n_queues, _mode: original(ops, costs, untracked, n_queues, mode)
    try:
        yield
    finally:
        api.schedule = original


def compile_case(case: Case, model, inputs, target: str, fusion: str, scheduler: str) -> Executable:
    with backend_scheduler(scheduler):
        return compiler.compile(model, inputs, target=target, auto_cast=case.auto_cast, fusion=fusion,
                                scheduler="inorder" if scheduler == "inorder" else "list")


def matmul_flops(model, inputs) -> float:
    """FLOPs of the matmuls and convolutions of one forward pass (torch's flop counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*inputs)
    return float(counter.get_total_flops())


def eager_seconds(model, inputs, repeats: int = 3) -> tuple[float, np.ndarray]:
    """Best wall time of torch eager on CPU over `repeats` runs after a warm-up (the least disturbed by
    other work on the machine) and its first output."""
    with torch.no_grad():
        out = model(*inputs)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model(*inputs)
            times.append(time.perf_counter() - start)
    first = out[0] if isinstance(out, tuple | list) else out
    return min(times), first.float().numpy()


def _top_stalls(profile: Profile, n: int = 3) -> str:
    stalls = sorted(((us, e, s) for e, by in profile.stalls.items() for s, us in by.items()), reverse=True)[:n]
    return "; ".join(f"{e}<-{s} {us:.0f}us" for us, e, s in stalls)


def measure(case: Case, target: str = "trn1", fusion: str = "greedy", scheduler: str = "list",
            full: bool = True, verbose: bool = False) -> tuple[Result, Profile | None]:
    """Compile and emulate one model; `full` adds the bounds, torch eager and numerics."""
    result = Result(case.name, fusion=fusion, scheduler=scheduler)
    model, inputs = case.build()
    try:
        start = time.perf_counter()
        exe = compile_case(case, model, inputs, target, fusion, scheduler)
        result.compile_s = time.perf_counter() - start
    except NeuroncError as e:
        result.status = f"not supported yet: {_one_line(e)}"
        return result, None
    except Exception as e:  # a compiler bug: report it, keep the suite going
        if verbose:
            traceback.print_exc()
        result.status = f"compiler crash: {type(e).__name__}: {_one_line(e)}"
        return result, None
    program = exe.program
    result.instructions = len(program.instructions)
    schedule = exe.reports.get("schedule.txt", "")
    if "estimated end " in schedule:
        result.estimate_us = float(schedule.split("estimated end ")[1].split()[0])
    feeds = {name: to_numpy(x) for name, x in zip(program.inputs, inputs, strict=True)}
    try:
        start = time.perf_counter()
        run = run_program(program, feeds)
        result.emulate_s = time.perf_counter() - start
    except Exception as e:
        if verbose:
            traceback.print_exc()
        result.status = f"emulator error: {type(e).__name__}: {_one_line(e)}"
        return result, None
    prof = run.profile
    result.sim_us, result.mfu = prof.time_us, prof.mfu
    result.hbm_traffic_mib = (prof.hbm_read_bytes + prof.hbm_write_bytes) / 2**20
    result.peak_sbuf_mib = prof.peak_sbuf_bytes / 2**20
    result.busy = {k: round(v, 3) for k, v in prof.engine_busy.items()}
    result.stalls = _top_stalls(prof)
    if full:
        machine = load_target(target)
        flops = matmul_flops(model, inputs)
        peak = machine.pe_peak_flops_bf16
        if case.auto_cast == "none":
            peak /= machine.data["pe"]["fp32_factor"]
        compulsory = sum(t.nbytes for t in program.tensors.values() if t.kind in ("input", "const", "output"))
        pe_us = flops / peak * 1e6
        hbm_us = compulsory / (machine.data["hbm"]["bytes_per_ns"] * 1e3)
        result.matmul_gflop, result.compulsory_mib = flops / 1e9, compulsory / 2**20
        result.roofline_us = max(pe_us, hbm_us)
        result.bound = "pe" if pe_us >= hbm_us else "hbm"
        result.roofline_eff = result.roofline_us / prof.time_us
        result.eager_s, reference = eager_seconds(model, inputs)
        result.emulate_over_eager = result.emulate_s / result.eager_s
        out = run.outputs[program.outputs[0]].astype(np.float32).reshape(reference.shape)
        result.max_rel_err = float(np.max(np.abs(out - reference)) / max(np.max(np.abs(reference)), 1e-30))
    return result, prof


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


# -- reports -----------------------------------------------------------------------------------------------------

COLUMNS = [("model", "{}"), ("sim_us", "{:.1f}"), ("mfu", "{:.1%}"), ("roofline_eff", "{:.1%}"), ("bound", "{}"),
           ("hbm_traffic_mib", "{:.1f}"), ("compulsory_mib", "{:.1f}"), ("peak_sbuf_mib", "{:.1f}"),
           ("compile_s", "{:.1f}"), ("emulate_s", "{:.1f}"), ("eager_s", "{:.3f}"),
           ("emulate_over_eager", "{:.1f}x"), ("max_rel_err", "{:.1e}")]
HEADERS = {"sim_us": "sim us", "mfu": "MFU", "roofline_eff": "roofline eff", "hbm_traffic_mib": "HBM MiB",
           "compulsory_mib": "compulsory MiB", "peak_sbuf_mib": "peak SBUF MiB", "compile_s": "compile s",
           "emulate_s": "emulate s", "eager_s": "eager s", "emulate_over_eager": "emu/eager",
           "max_rel_err": "max rel err"}


def markdown_table(results: list[Result]) -> str:
    lines = ["| " + " | ".join(HEADERS.get(c, c) for c, _ in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in results:
        if r.status != "ok":
            lines.append(f"| {r.model} | {r.status} |" + " |" * (len(COLUMNS) - 2))
            continue
        lines.append("| " + " | ".join(fmt.format(getattr(r, c)) for c, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def profile_table(results: list[Result]) -> str:
    """Engine busy fractions, the scheduler's estimate and the largest stalls: what bounds each model."""
    engines = ("pe", "act", "dve", "pool", "sp", "dma")
    lines = ["| model | instructions | estimate us | " + " | ".join(f"{e} busy" for e in engines)
             + " | largest stalls |", "|" + "---|" * (len(engines) + 4)]
    for r in results:
        if r.status == "ok":
            busy = " | ".join(f"{100 * r.busy.get(e, 0):.0f}%" for e in engines)
            lines.append(f"| {r.model} | {r.instructions} | {r.estimate_us:.1f} | {busy} | {r.stalls} |")
    return "\n".join(lines)


def write_csv(results: list[Result], path: Path) -> None:
    rows = []
    for r in results:
        row = asdict(r)
        busy = row.pop("busy")
        row.update({f"busy_{k}": v for k, v in busy.items()})
        rows.append(row)
    names = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)


# -- modes -------------------------------------------------------------------------------------------------------

def run_suite(cases: list[Case], args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    profiles: dict[str, Profile] = {}
    for case in cases:
        print(f"== {case.name}: {case.description}", flush=True)
        result, prof = measure(case, args.target, verbose=args.verbose)
        results.append(result)
        if prof is not None:
            profiles[case.name] = prof
            print(f"   {result.sim_us:.1f} us, MFU {result.mfu:.1%}, roofline {result.roofline_eff:.1%} "
                  f"({result.bound}); compile {result.compile_s:.1f} s, emulate {result.emulate_s:.1f} s, "
                  f"eager {result.eager_s:.3f} s", flush=True)
        else:
            print(f"   {result.status}", flush=True)
    table, details = markdown_table(results), profile_table(results)
    print("\n" + table + "\n\n" + details)
    write_csv(results, out / "suite.csv")
    (out / "suite.md").write_text(table + "\n\n" + details + "\n")
    shown = args.timeline if args.timeline in profiles else next(iter(profiles), None)
    if shown is not None:
        plot_timeline(profiles[shown], str(out / f"{shown}.timeline.png"), shown)
        profiles[shown].save_trace(str(out / f"{shown}.trace.json"))
        print(f"\ntimeline of {shown}: {out / f'{shown}.timeline.png'} (Perfetto: {out / f'{shown}.trace.json'})")
    print(f"results: {out / 'suite.csv'}, {out / 'suite.md'}")


def fusion_available(mode: str) -> str | None:
    """None if compiler.compile accepts fusion=`mode`, else the compiler's refusal."""
    try:
        compiler.compile(torch.nn.Linear(8, 8).eval(), (torch.randn(4, 8),), fusion=mode)
    except NeuroncError as e:
        return _one_line(e)
    return None


def run_compare(cases: list[Case], args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unavailable = {f: fusion_available(f) for f in FUSIONS}
    combos = [(f, s) for f in FUSIONS for s in SCHEDULERS]
    rows: list[dict[str, str]] = []
    for case in cases:
        print(f"== {case.name}", flush=True)
        row = {"model": case.name}
        for fusion, scheduler in combos:
            key = f"{fusion}/{scheduler}"
            if unavailable[fusion] is not None:
                row[key] = "unavailable"
                continue
            result, _ = measure(case, args.target, fusion, scheduler, full=False, verbose=args.verbose)
            row[key] = f"{result.sim_us:.1f}" if result.status == "ok" else _short(result.status)
            print(f"   {key:<20} {row[key]}", flush=True)
        for fusion in FUSIONS:
            try:
                speedup = float(row[f"{fusion}/inorder"]) / float(row[f"{fusion}/list"])
                row[f"{fusion} list speedup"] = f"{speedup:.2f}x"
            except ValueError:
                row[f"{fusion} list speedup"] = "-"
        rows.append(row)
    keys = ["model"] + [f"{f}/{s}" for f, s in combos] + [f"{f} list speedup" for f in FUSIONS]
    lines = ["simulated time (us) by fusion/scheduler; inorder = program order, ready_time = the first list "
             "scheduler, list = critical-path list scheduling",
             "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(row.get(k, "") for k in keys) + " |" for row in rows]
    for fusion, why in unavailable.items():
        if why is not None:
            lines.append(f"\nfusion={fusion} unavailable: {why}")
    text = "\n".join(lines)
    print("\n" + text)
    (out / "compare.md").write_text(text + "\n")
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    print(f"results: {out / 'compare.csv'}, {out / 'compare.md'}")


def _short(status: str) -> str:
    return status.split(":")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="model names (default: all of benchmarks/models.py SUITE)")
    parser.add_argument("--target", default="trn1")
    parser.add_argument("--compare", action="store_true", help="every fusion mode x scheduler, per model")
    parser.add_argument("--out", default=os.path.join("out", "bench"), help="output folder (CSV, markdown, PNG)")
    parser.add_argument("--timeline", default="gpt2_block_s128",
                        help="model whose timeline PNG and trace are written (else the first that ran)")
    parser.add_argument("--verbose", action="store_true", help="tracebacks of compiler/emulator crashes")
    args = parser.parse_args(argv)
    try:
        cases = by_name(args.models)
    except KeyError as e:
        parser.error(str(e.args[0]))
    torch.set_grad_enabled(False)
    (run_compare if args.compare else run_suite)(cases, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
