"""Compile and profile an M x K x N GEMM (a bias-free Linear) and compare it with the machine's bounds.

    .venv/bin/python benchmarks/gemm.py --size 2048 --auto-cast matmult
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import compiler
from isa.target import load_target


def lower_bound_us(m: int, k: int, n: int, target_name: str, in_bytes: int, out_bytes: int) -> dict[str, float]:
    """Physical lower bounds from machine-model.md: PE peak for the FLOPs, HBM bandwidth for the bytes."""
    target = load_target(target_name)
    flops = 2 * m * k * n
    peak = target.pe_peak_flops_bf16 / (1 if in_bytes <= 2 else target.data["pe"]["fp32_factor"])
    compute_us = flops / peak * 1e6
    x_bytes = m * k * 4  # the input arrives in fp32 from the host side
    compulsory = x_bytes + k * n * in_bytes + m * n * out_bytes
    hbm_us = compulsory / (target.data["hbm"]["bytes_per_ns"] * 1e3)
    return {"compute_us": compute_us, "hbm_us": hbm_us, "bound_us": max(compute_us, hbm_us)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=2048, help="M = K = N")
    parser.add_argument("--target", default="trn1")
    parser.add_argument("--auto-cast", default="matmult", choices=["none", "matmult"])
    parser.add_argument("--trace", help="write the Perfetto trace here")
    args = parser.parse_args()
    m = k = n = args.size
    torch.manual_seed(0)
    model = torch.nn.Linear(k, n, bias=False).eval()
    x = torch.randn(m, k)

    start = time.perf_counter()
    exe = compiler.compile(model, (x,), target=args.target, auto_cast=args.auto_cast)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    prof = exe.profile(x)
    emulate_s = time.perf_counter() - start
    (out,) = exe.run(x)
    expected = model(x).detach().numpy()
    error = float(np.max(np.abs(out - expected)) / np.max(np.abs(expected)))
    a, b = x.numpy(), model.weight.detach().numpy().T.copy()
    start = time.perf_counter()
    a @ b
    numpy_s = time.perf_counter() - start

    bounds = lower_bound_us(m, k, n, args.target, 2 if args.auto_cast == "matmult" else 4, 4)
    print(prof.summary())
    print(f"\nGEMM {m}x{k}x{n} {args.auto_cast} on {args.target}")
    print(f"  simulated time      {prof.time_us:10.1f} us")
    print(f"  lower bound         {bounds['bound_us']:10.1f} us  (PE {bounds['compute_us']:.1f} us, "
          f"HBM {bounds['hbm_us']:.1f} us)")
    print(f"  MFU                 {prof.mfu:10.1%}")
    print(f"  of the bound        {bounds['bound_us'] / prof.time_us:10.1%}")
    print(f"  instructions        {len(exe.program.instructions):10d}")
    print(f"  compile wall time   {compile_s:10.2f} s")
    print(f"  emulator wall time  {emulate_s:10.2f} s  ({len(exe.program.instructions) / emulate_s:,.0f} instr/s;"
          f" numpy matmul {numpy_s:.3f} s)")
    print(f"  max relative error  {error:10.2e}")
    if args.trace:
        prof.save_trace(args.trace)


if __name__ == "__main__":
    main()
