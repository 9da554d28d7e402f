"""HBM traffic of the model zoo under each fusion strategy, peak SBUF, and traffic vs. compulsory traffic.

    .venv/bin/python benchmarks/zoo_table.py                      # fp32, every zoo model
    .venv/bin/python benchmarks/zoo_table.py --auto-cast matmult  # bf16 matmuls
    .venv/bin/python benchmarks/zoo_table.py --gpt2-small 128 512 # + GPT-2-small blocks at these lengths

For every model of tests/frontend/zoo.py (and optionally GPT-2-small blocks from benchmarks/models.py):
HBM bytes read + written by the emulated program with --fusion none, greedy and cost; peak SBUF (bytes
over all partitions, greedy); compulsory bytes = the program's inputs, constants (weights, in their
compiled dtype) and outputs, each moved once; and their ratio (greedy). A model the compiler cannot
compile is reported with its error. Writes out/zoo_table.md and prints it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler.errors import NeuroncError  # noqa: E402
from isa.dtypes import dtype as isa_dtype  # noqa: E402

STRATEGIES = ("none", "greedy", "cost")


def compulsory_bytes(exe: compiler.Executable) -> int:
    total = 0
    for tensor in exe.program.tensors.values():
        if tensor.kind in ("input", "const", "output"):
            total += int(np.prod(tensor.shape, dtype=np.int64)) * isa_dtype(tensor.dtype).itemsize
    return total


def measure(model: torch.nn.Module, inputs: tuple, fusion: str, auto_cast: str) -> dict:
    exe = compiler.compile(model, inputs, fusion=fusion, auto_cast=auto_cast)
    # s64 values (token ids) are int32 on the device: the program takes its own types
    prof = exe.profile(*(t.to(torch.int32) if t.dtype == torch.int64 else t for t in inputs))
    return {"hbm": prof.hbm_read_bytes + prof.hbm_write_bytes, "peak_sbuf": prof.peak_sbuf_bytes,
            "time_us": prof.time_us, "compulsory": compulsory_bytes(exe)}


def models(names: list[str] | None, gpt2_lengths: list[int]):
    from tests.frontend.zoo import ZOO

    for name, factory in ZOO.items():
        if not names or name in names:
            torch.manual_seed(0)
            yield name, factory
    if gpt2_lengths:
        from benchmarks.models import block

        for seq in gpt2_lengths:
            case = block(seq)
            yield case.name, case.build


def _mib(n: int) -> str:
    return f"{n / 2**20:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto-cast", default="none", choices=["none", "matmult", "all"])
    parser.add_argument("--models", nargs="*", help="zoo models (default: all)")
    parser.add_argument("--gpt2-small", nargs="*", type=int, default=[], metavar="SEQ",
                        help="also GPT-2-small blocks (d=768, 12 heads, MLP 3072) at these sequence lengths")
    parser.add_argument("--output", default="out/zoo_table.md")
    args = parser.parse_args(argv)
    header = ("| model | HBM MiB none | HBM MiB greedy | HBM MiB cost | compulsory MiB | greedy / compulsory "
              "| peak SBUF MiB | time us none / greedy / cost |")
    lines = [f"Zoo, auto-cast {args.auto_cast}: HBM bytes read + written per inference (emulated)", "",
             header, "|" + "---|" * (header.count("|") - 1)]
    for name, factory in models(args.models, args.gpt2_small):
        model, inputs = factory()
        try:
            runs = {s: measure(model, inputs, s, args.auto_cast) for s in STRATEGIES}
        except NeuroncError as e:
            lines.append(f"| {name} | not compiled: {str(e).splitlines()[0][:150]} |||||||")
            print(lines[-1], flush=True)
            continue
        g = runs["greedy"]
        times = " / ".join(f"{runs[s]['time_us']:.1f}" for s in STRATEGIES)
        lines.append(f"| {name} | {_mib(runs['none']['hbm'])} | {_mib(g['hbm'])} | {_mib(runs['cost']['hbm'])} | "
                     f"{_mib(g['compulsory'])} | {g['hbm'] / g['compulsory']:.2f} | {_mib(g['peak_sbuf'])} | {times} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"\n{text}\nwritten to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
