"""The profiler at scale: compile a model, save its .neff, then check and time `prof.by_op()` and the HTML report.

Models: `gpt2_block` (benchmarks.models' GPT-2-small block, seq 128, auto-cast matmult) and `hf_gpt2_small`
(transformers GPT2Model, the default config: 12 layers, d 768, 12 heads; random weights; input ids [1, 128]).

Prints: instructions, simulated time, the sum of the by-op rows against the total, whether every row names an
instruction of exe.hlo, the share of time traced to torch module paths, the wall time of a plain emulated run
and of profiling (run + rows + by-layer + HTML), and the report's size. With --neff the .neff is kept, for
timing the CLI side by side: `farm-bench -- neuronc profile X.neff --html r.html --vs 'neuronc run X.neff'`.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import torch

import compiler
from benchmarks.models import SUITE
from isa.emulator.attribution import layer_of


def build(name: str, seq: int) -> tuple[torch.nn.Module, tuple, str]:
    if name == "hf_gpt2_small":
        from transformers import GPT2Config, GPT2Model

        torch.manual_seed(0)
        model = GPT2Model(GPT2Config(use_cache=False)).eval()
        return model, (torch.randint(0, 50257, (1, seq)),), "none"
    case = next(c for c in SUITE if c.name == f"gpt2_block_s{seq}")
    model, inputs = case.build()
    return model, inputs, case.auto_cast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("gpt2_block", "hf_gpt2_small"), default="gpt2_block")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--html", default="report.html")
    parser.add_argument("--neff", help="also save the compiled .neff here")
    args = parser.parse_args()
    model, inputs, auto_cast = build(args.model, args.seq)
    t0 = time.perf_counter()
    exe = compiler.compile(model, inputs, auto_cast=auto_cast)
    compile_s = time.perf_counter() - t0
    if args.neff:
        exe.save(args.neff)
    feed = exe.random_inputs()
    exe.run(*feed)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    exe.run(*feed)
    run_s, run_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    prof = exe.profile(*feed)
    rows = prof.by_op()
    layers = prof.by_layer(2)
    size = prof.save_html(args.html)
    profile_s, profile_cpu = time.perf_counter() - t0, time.process_time() - c0
    names = set(re.findall(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=", exe.hlo, re.M))
    total = sum(r.time_us for r in rows)
    print(f"model {args.model} seq {args.seq}: {len(exe.program.instructions)} instructions, "
          f"{len(rows)} ops, {len(layers)} layers at depth 2; compile {compile_s:.1f} s")
    print(f"simulated {prof.time_us:.1f} us; rows sum {total:.1f} us ({100 * (total / prof.time_us - 1):+.4f}%)")
    print(f"rows naming an instruction of exe.hlo: {sum(r.name in names for r in rows)}/{len(rows)}")
    print(f"time traced to torch module paths: {100 * prof.traced_fraction():.1f}%; ops spanning several modules "
          f"at depth 2: {sum(len({layer_of(m, 2) for m in r.modules}) > 1 for r in rows)}")
    print(f"plain emulated run {run_s:.2f} s wall, {run_cpu:.2f} s CPU; profile + rows + HTML {profile_s:.2f} s "
          f"wall, {profile_cpu:.2f} s CPU ({profile_cpu / run_cpu:.2f}x CPU); report {Path(args.html).name} "
          f"{size / 1e6:.2f} MB")
    print()
    print(prof.table("layer", depth=2, top=8))


if __name__ == "__main__":
    main()
