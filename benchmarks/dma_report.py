"""Where a model's DMA time goes: every transfer grouped by the kernel step that issued it.

    .venv/bin/python benchmarks/dma_report.py gpt2_block_s128          # a model of benchmarks/models.py
    .venv/bin/python benchmarks/dma_report.py --hf-gpt2 12 128         # HF GPT-2 small, 12 layers, seq 128

Per group: transfers, bytes, effective bytes (the queue time in bytes: each contiguous run pays the
target's descriptor overhead, isa.emulator.timing.dma_effective_bytes) and the transfers whose runs
average under 512 bytes (element-wise or nearly: the first thing to remove). Also the simulated time,
MFU, HBM traffic against the compulsory bytes (counted as benchmarks/real_models.py's bound counts them: an
embedding table only for its gathered rows) and the largest relative error against torch eager.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from benchmarks.models import by_name  # noqa: E402
from benchmarks.real_models import compulsory_bytes, embedding_savings  # noqa: E402
from compiler.driver import to_numpy  # noqa: E402
from isa.emulator import run_program  # noqa: E402
from isa.emulator.indirect import indirect_effective_bytes  # noqa: E402
from isa.emulator.timing import contiguous_runs, dma_effective_bytes  # noqa: E402
from isa.instructions import DMA_OPCODES  # noqa: E402
from isa.target import load_target  # noqa: E402

SMALL_RUN = 512  # bytes: machine-model.md "DMA": shorter contiguous runs run well below peak


def hf_gpt2(layers: int, seq: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """HF GPT-2 small (transformers' default config, random weights) on `seq` token ids."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_layer=layers, use_cache=False)).eval(), (torch.randint(0, 50257, (1, seq)),)


def report(model: torch.nn.Module, inputs: tuple, auto_cast: str, target: str, top: int) -> str:
    exe = compiler.compile(model, inputs, target=target, auto_cast=auto_cast)
    program = exe.program
    feeds = {n: to_numpy(x) for n, x in zip(program.inputs, inputs, strict=True)}
    run = run_program(program, feeds)
    prof, machine = run.profile, load_target(target)
    with torch.no_grad():
        ref = model(*inputs)
    ref = getattr(ref, "last_hidden_state", ref)
    ref = (ref[0] if isinstance(ref, tuple | list) else ref).float().numpy()
    out = run.outputs[program.outputs[0]].astype(np.float32).reshape(ref.shape)
    error = float(np.max(np.abs(out - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    # as real_models.py's bound: inputs, outputs and the weights once in their compute dtype, an (untied)
    # embedding table only for the rows gathered (the program's constants hold the whole table)
    compulsory = compulsory_bytes(program, model, auto_cast, embedding_savings(model, inputs, {}))
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])
    count = 0
    for inst in program.instructions:
        if inst.opcode not in DMA_OPCODES:
            continue
        count += 1
        dst, src = inst.operands["dst"], inst.operands["src"]
        row = groups[re.sub(r"\d+", "#", inst.comment)[:70]]
        row[0] += 1
        row[1] += src.nbytes
        if inst.opcode == "dma_indirect":  # one descriptor per row at least
            effective = indirect_effective_bytes(machine, inst)
            row[2] += effective
            descriptors = (effective - src.nbytes) / machine.data["dma"]["descriptor_overhead_bytes"]
            row[3] += src.nbytes / max(1.0, descriptors) < SMALL_RUN
            continue
        row[2] += dma_effective_bytes(machine, dst, src)
        row[3] += src.nbytes / max(contiguous_runs(src), contiguous_runs(dst)) < SMALL_RUN
    lines = [f"sim {prof.time_us:.1f} us, MFU {prof.mfu:.1%}, HBM read/write {prof.hbm_read_bytes / 2**20:.1f}/"
             f"{prof.hbm_write_bytes / 2**20:.1f} MiB, compulsory {compulsory / 2**20:.1f} MiB, {count} DMAs, "
             f"max rel err {error:.1e}",
             f"{'step (digits as #)':<72}{'DMAs':>6}{'MiB':>9}{'eff MiB':>9}{'< 512 B':>8}"]
    for key, (n, nbytes, eff, small) in sorted(groups.items(), key=lambda kv: -kv[1][2])[:top]:
        lines.append(f"{key:<72}{n:>6}{nbytes / 2**20:>9.2f}{eff / 2**20:>9.2f}{small:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="a model of benchmarks/models.py")
    parser.add_argument("--hf-gpt2", nargs=2, type=int, metavar=("LAYERS", "SEQ"), help="HF GPT-2 small instead")
    parser.add_argument("--auto-cast", default="matmult")
    parser.add_argument("--target", default="trn1")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    if args.hf_gpt2:
        model, inputs = hf_gpt2(*args.hf_gpt2)
    elif args.model:
        model, inputs = by_name([args.model])[0].build()
    else:
        parser.error("name a model or give --hf-gpt2 LAYERS SEQ")
    print(report(model, inputs, args.auto_cast, args.target, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
