"""Simulated time of the sort, top-k and scan kernels on the emulator (trn1 unless --target):

    PYTHONPATH=$PWD .venv/bin/python benchmarks/sort_topk.py [--target trn1] [--check]

- sort of f32[128, 1024] along the last dim with jnp.sort's comparator (-0/NaN canonicalized, TOTALORDER);
- top-k k=8 of f32[4, 50257] (GPT-2 logits);
- cumsum of s32[8, 512] (RoBERTa's position ids) and of f32[64, 1024].
Each result is checked against the HLO interpreter; prints the simulated time, the busiest engine and the
instruction count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import compiler  # noqa: E402
from hlo.interpreter import evaluate  # noqa: E402
from hlo.parser import parse_module  # noqa: E402

SORT = """HloModule sort
%cmp {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %nan = f32[] constant(nan)
  %zero = f32[] constant(0)
  %na = pred[] compare(%a, %a), direction=NE
  %za = pred[] compare(%a, %zero), direction=EQ
  %ca0 = f32[] select(%za, %zero, %a)
  %ca = f32[] select(%na, %nan, %ca0)
  %nb = pred[] compare(%b, %b), direction=NE
  %zb = pred[] compare(%b, %zero), direction=EQ
  %cb0 = f32[] select(%zb, %zero, %b)
  %cb = f32[] select(%nb, %nan, %cb0)
  ROOT %r = pred[] compare(%ca, %cb), direction=LT, type=TOTALORDER
}
ENTRY %main {
  %x = f32[128,1024] parameter(0)
  ROOT %s = f32[128,1024] sort(%x), dimensions={1}, is_stable=true, to_apply=%cmp
}
"""

TOPK = """HloModule topk
ENTRY %main {
  %x = f32[4,50257] parameter(0)
  %t = (f32[4,8], s32[4,8]) topk(%x), k=8, largest=true
  %v = f32[4,8] get-tuple-element(%t), index=0
  %i = s32[4,8] get-tuple-element(%t), index=1
  ROOT %r = (f32[4,8], s32[4,8]) tuple(%v, %i)
}
"""


def cumsum(dtype: str, rows: int, n: int) -> str:
    return f"""HloModule cumsum
%add {{
  %a = {dtype}[] parameter(0)
  %b = {dtype}[] parameter(1)
  ROOT %r = {dtype}[] add(%a, %b)
}}
ENTRY %main {{
  %x = {dtype}[{rows},{n}] parameter(0)
  %z = {dtype}[] constant(0)
  ROOT %c = {dtype}[{rows},{n}] reduce-window(%x, %z), window={{size=1x{n} pad=0_0x{n - 1}_0}}, to_apply=%add
}}
"""


def _inputs(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "sort f32[128,1024]":
        return [rng.standard_normal((128, 1024)).astype(np.float32)]
    if name == "topk k=8 f32[4,50257]":
        return [rng.standard_normal((4, 50257)).astype(np.float32)]
    if name.startswith("cumsum s32"):
        return [rng.integers(0, 2, (8, 512)).astype(np.int32)]
    return [rng.standard_normal((64, 1024)).astype(np.float32)]


CASES = {"sort f32[128,1024]": SORT, "topk k=8 f32[4,50257]": TOPK, "cumsum s32[8,512]": cumsum("s32", 8, 512),
         "cumsum f32[64,1024]": cumsum("f32", 64, 1024)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="trn1")
    ap.add_argument("--case", action="append", help="only these cases")
    args = ap.parse_args(argv)
    status = 0
    for name, text in CASES.items():
        if args.case and name not in args.case:
            continue
        inputs = _inputs(name)
        exe = compiler.compile(text, target=args.target, opt_level=2)
        got, prof = exe.run_with_profile(*inputs)
        want = evaluate(parse_module(text), inputs)
        want = list(want) if isinstance(want, (list, tuple)) else [want]
        same = all(np.array_equal(np.asarray(g), np.asarray(w)) or np.allclose(g, w, rtol=1e-4, atol=1e-3)
                   for g, w in zip(got, want, strict=True))
        status |= not same
        busy = max(prof.engine_busy.items(), key=lambda kv: kv[1])
        print(f"{name:24s} {prof.time_us:10.1f} us  busiest {busy[0]} {busy[1]:.0%}  "
              f"{sum(prof.instruction_counts.values()):6d} instructions  {'matches' if same else 'WRONG'}",
              flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
