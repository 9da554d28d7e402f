"""Emulator speed on one compiled program next to torch eager on the model it came from.

    .venv/bin/python benchmarks/emulate_speed.py gpt2.neff --model benchmarks/hf_gpt2_small.py
    .venv/bin/python benchmarks/emulate_speed.py gpt2.neff --checks rules --runs 5

Prints, in seconds: loading the .neff, decoding (rule checks per --checks, views, numerics
closures), the first run (scheduled: timing, semaphores, DMA queues, numerics), the median of the
later runs (replayed numerics, see isa.emulator.Emulator), instructions per second of both, and
with --model the median of torch eager forward passes (after a warm-up) and the ratios. Inputs are
the model file's example inputs when --model is given (so the error against eager is printed too),
else random ones.
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


def _clock(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


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
    parser.add_argument("--only", choices=("setup", "emulate", "eager"),
                        help="for timing whole processes side by side (needs --model): build the model, "
                             "then nothing more (setup), load and emulate once with run_program (emulate), "
                             "or run one eager forward pass (eager); emulation = emulate - setup")
    args = parser.parse_args(argv)
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
        reference = reference[0] if isinstance(reference, tuple | list) else getattr(reference, "last_hidden_state",
                                                                                      reference)
    else:
        rng = np.random.default_rng(0)
        feeds = {name: rng.standard_normal(program.tensors[name].shape).astype(np.float32)
                 for name in program.inputs}
    t_decode, emulator = _clock(lambda: Emulator(program, checks=args.checks))
    n = len(emulator.ops)
    t_first, result = _clock(lambda: emulator.run(feeds))
    later = [_clock(lambda: emulator.run(feeds))[0] for _ in range(args.runs)]
    t_later = statistics.median(later) if later else float("nan")
    print(f"{args.neff}: {n} instructions, checks {args.checks}")
    print(f"load .neff        {t_load:8.3f} s")
    print(f"decode            {t_decode:8.3f} s")
    print(f"first run         {t_first:8.3f} s  {n / t_first:12,.0f} instructions/s (scheduled)")
    print(f"later runs (med.) {t_later:8.3f} s  {n / t_later:12,.0f} instructions/s (replayed)")
    print(f"decode + first    {t_decode + t_first:8.3f} s  {n / (t_decode + t_first):12,.0f} instructions/s")
    if eager:
        t_eager = statistics.median(eager)
        out = next(iter(result.outputs.values()))
        ref = reference.detach().numpy()
        err = float(np.max(np.abs(out.reshape(ref.shape) - ref)) / max(np.max(np.abs(ref)), 1e-30))
        print(f"torch eager (med.) {t_eager:7.3f} s")
        print(f"ratios: later/eager {t_later / t_eager:.2f}x, (decode + first)/eager "
              f"{(t_decode + t_first) / t_eager:.2f}x; max rel err vs eager {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
