"""Emulator speed on one compiled program next to torch eager on the model it came from.

    .venv/bin/python benchmarks/emulate_speed.py gpt2.neff --model benchmarks/hf_gpt2_small.py
    .venv/bin/python benchmarks/emulate_speed.py gpt2.neff --checks rules --runs 5

Prints, in seconds of wall time and of CPU time (time.process_time; the figure to compare on a busy
machine): loading the .neff, decoding (rule checks per --checks, views, numerics closures), the
first run (scheduled: timing, semaphores, DMA queues, numerics), the median of the later runs
(replayed numerics, see isa.emulator.Emulator), instructions per second of both, and with --model
the median of torch eager forward passes (after a warm-up; torch's threads: --threads, default
torch's own) and the ratios. Inputs are the model file's example inputs when --model is given (so
the error against eager is printed too), else random ones. The emulator computes on one thread
(its BLAS calls are sized for that): `--threads 1` compares it with torch on one thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.model_files import load_model_file  # noqa: E402
from isa.dtypes import dtype as lookup_dtype  # noqa: E402
from isa.emulator import CHECKS, Emulator, run_program  # noqa: E402
from isa.neff import load  # noqa: E402


class Timed(float):
    """Wall seconds (the float) with the CPU seconds of the same interval in ``.cpu``."""

    cpu: float


def _clock(fn):
    start, cpu = time.perf_counter(), time.process_time()
    value = fn()
    timed = Timed(time.perf_counter() - start)
    timed.cpu = time.process_time() - cpu
    return timed, value


def _median(values: list[Timed]) -> Timed:
    timed = Timed(statistics.median(values))
    timed.cpu = statistics.median(v.cpu for v in values)
    return timed


def _row(name: str, t: Timed, n: int | None = None, note: str = "") -> str:
    rate = f"  {n / t:12,.0f} /s wall  {n / t.cpu:12,.0f} /s CPU instructions {note}" if n else ""
    return f"{name:<18}{t:8.3f} s wall {t.cpu:8.3f} s CPU{rate}"


def _only(args: argparse.Namespace) -> int:
    model, example, _ = load_model_file(args.model)
    if args.only == "eager":
        with torch.no_grad():
            model(*example)
    elif args.only == "emulate":
        program = load(args.neff)
        feeds = {name: x.detach().numpy().astype(lookup_dtype(program.tensors[name].dtype).numpy)
                 for name, x in zip(program.inputs, example, strict=True)}
        run_program(program, feeds, **({} if args.checks == "rules" else {"checks": args.checks}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("neff")
    parser.add_argument("--model", help="the model file the .neff was compiled from (get_model())")
    parser.add_argument("--checks", choices=CHECKS, default="off")
    parser.add_argument("--runs", type=int, default=3, help="runs after the first (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch's intra-op threads (default: torch's)")
    parser.add_argument("--only", choices=("setup", "emulate", "eager"),
                        help="for timing whole processes side by side (needs --model): build the model, "
                             "then nothing more (setup), load and emulate once with run_program (emulate), "
                             "or run one eager forward pass (eager); emulation = emulate - setup")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.only:
        return _only(args)

    t_load, program = _clock(lambda: load(args.neff))
    feeds, eager = None, None
    if args.model:
        model, example, _ = load_model_file(args.model)
        feeds = {name: x.detach().numpy().astype(lookup_dtype(program.tensors[name].dtype).numpy)
                 for name, x in zip(program.inputs, example, strict=True)}
        with torch.no_grad():
            reference = model(*example)
            eager = []
            for _ in range(max(3, args.runs)):
                t, reference = _clock(lambda: model(*example))
                eager.append(t)
        if hasattr(reference, "to_tuple"):  # a transformers ModelOutput (last_hidden_state, logits, ...)
            reference = reference.to_tuple()
        reference = reference[0] if isinstance(reference, tuple | list) else reference
    else:
        rng = np.random.default_rng(0)
        feeds = {name: rng.standard_normal(program.tensors[name].shape).astype(np.float32)
                 for name in program.inputs}
    t_decode, emulator = _clock(lambda: Emulator(program, checks=args.checks))
    n = len(emulator.ops)
    t_first, result = _clock(lambda: emulator.run(feeds))
    later = [_clock(lambda: emulator.run(feeds))[0] for _ in range(args.runs)]
    t_later = _median(later) if later else Timed(float("nan"))
    if not later:
        t_later.cpu = float("nan")
    both = Timed(t_decode + t_first)
    both.cpu = t_decode.cpu + t_first.cpu
    print(f"{args.neff}: {n} instructions, checks {args.checks}")
    print(_row("load .neff", t_load))
    print(_row("decode", t_decode))
    print(_row("first run", t_first, n, "(scheduled)"))
    print(_row("later runs (med.)", t_later, n, "(replayed)"))
    print(_row("decode + first", both, n))
    if eager:
        t_eager = _median(eager)
        out = next(iter(result.outputs.values()))
        ref = reference.detach().numpy()
        err = float(np.max(np.abs(out.reshape(ref.shape) - ref)) / max(np.max(np.abs(ref)), 1e-30))
        print(_row("torch eager (med.)", t_eager) + f"  ({torch.get_num_threads()} threads)")
        for clock, pick in (("wall", float), ("CPU", lambda t: t.cpu)):
            print(f"ratios ({clock}): later/eager {pick(t_later) / pick(t_eager):.2f}x, (decode + first)/eager "
                  f"{pick(both) / pick(t_eager):.2f}x")
        print(f"max rel err vs eager {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
