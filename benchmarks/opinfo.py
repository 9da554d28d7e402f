"""OpInfo survey: PyTorch's own op samples (torch.testing._internal.common_methods_invocations.op_db) of the
inference ops the frontend supports, for every dtype torch gives them, compiled and run on the emulator and
compared with torch eager on CPU.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/opinfo.py [--samples 2] [--op add --op sin] [-v]

Per sample: ``ok`` (exact for integers and bool; fp32 within rtol/atol 1e-4, f16/bf16 2e-2), ``refused`` (a
typed NeuroncError at compile time), ``crash`` (anything else), ``WRONG`` (ran, other numbers). Prints the
rate of ok over all samples tried, per dtype and in total. Needs the dev extra (expecttest).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8, torch.uint8,
          torch.bool)
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-2}


def supported_names() -> set[str]:
    from frontend import supported_operators

    return {name.split(".")[1] for name in supported_operators()}


def selected_ops(only: list[str] | None):
    from torch.testing._internal.common_methods_invocations import op_db

    names = supported_names()
    for op in op_db:
        base = op.name.split(".")[-1]
        if only and op.name not in only:
            continue
        if base in names or op.aten_name in names:
            yield op


class _Call(torch.nn.Module):
    def __init__(self, fn, args, kwargs, tensor_positions):
        super().__init__()
        self.fn, self.args, self.kwargs, self.positions = fn, list(args), kwargs, tensor_positions

    def forward(self, *tensors):
        args = list(self.args)
        for pos, t in zip(self.positions, tensors, strict=True):
            args[pos] = t
        return self.fn(*args, **self.kwargs)


def _flat(value) -> list[torch.Tensor] | None:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        out = []
        for v in value:
            f = _flat(v)
            if f is None:
                return None
            out.extend(f)
        return out
    return None


def compare(got: list[np.ndarray], want: list[torch.Tensor]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, torch gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w_np = w.detach().float().numpy() if w.dtype in (torch.bfloat16,) else w.detach().numpy()
        g = np.asarray(g)
        if g.shape != w_np.shape:
            return f"out{i}: shape {g.shape} vs {w_np.shape}"
        if w.dtype.is_floating_point:
            tol = TOL.get(w.dtype, 1e-4)
            if not np.allclose(g.astype(np.float64), w_np.astype(np.float64), rtol=tol, atol=tol, equal_nan=True):
                return f"out{i}: values differ (max abs {np.nanmax(np.abs(g.astype(np.float64) - w_np)):.3g})"
        elif not np.array_equal(g.astype(np.int64), w_np.astype(np.int64)):
            return f"out{i}: {int((g.astype(np.int64) != w_np.astype(np.int64)).sum())} elements differ"
    return None


def run_sample(op, sample) -> tuple[str, str]:
    import compiler
    from compiler.errors import NeuroncError

    args = [sample.input, *sample.args]
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    tensors = tuple(args[i] for i in positions)
    if not tensors or any(t.numel() == 0 for t in tensors):
        return "skipped", "no (or empty) tensor inputs"
    module = _Call(op.op, args, sample.kwargs, positions)
    try:
        with torch.no_grad():
            want = module(*tensors)
    except Exception as e:  # noqa: BLE001 - eager itself refuses the sample
        return "skipped", f"eager: {e}"
    flat = _flat(want)
    if flat is None:
        return "skipped", "non-tensor output"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exe = compiler.compile(module, tensors)
    except NeuroncError as e:
        return "refused", f"{type(e).__name__}: {e}".splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return "crash", f"compile: {type(e).__name__}: {e}".splitlines()[0]
    try:
        with np.errstate(all="ignore"):
            got = exe.run(*tensors)
    except Exception as e:  # noqa: BLE001
        return "crash", f"run: {type(e).__name__}: {e}".splitlines()[0]
    why = compare(got, flat)
    return ("WRONG", why) if why else ("ok", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2, help="samples per op and dtype")
    ap.add_argument("--op", action="append", help="only these OpInfo names")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    per_dtype: dict[str, Counter] = defaultdict(Counter)
    per_op: dict[str, Counter] = defaultdict(Counter)
    for op in selected_ops(args.op):
        for dtype in DTYPES:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            try:
                samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:args.samples]
            except Exception:  # noqa: BLE001 - some sample generators need more than CPU
                continue
            for sample in samples:
                status, why = run_sample(op, sample)
                per_dtype[str(dtype).removeprefix("torch.")][status] += 1
                per_op[op.name][status] += 1
                if args.verbose and status not in ("ok", "skipped"):
                    print(f"  {op.name:28s} {str(dtype):16s} {status:8s} {why[:150]}")
    statuses = ("ok", "refused", "crash", "WRONG", "skipped")
    print(f"\n{'dtype':10s} " + " ".join(f"{s:>8s}" for s in statuses) + "   ok rate")
    total: Counter = Counter()
    for dt, c in sorted(per_dtype.items()):
        total.update(c)
        tried = sum(c[s] for s in statuses if s != "skipped")
        print(f"{dt:10s} " + " ".join(f"{c[s]:8d}" for s in statuses) + f"   {c['ok'] / max(tried, 1):7.1%}")
    tried = sum(total[s] for s in statuses if s != "skipped")
    print(f"{'TOTAL':10s} " + " ".join(f"{total[s]:8d}" for s in statuses) + f"   {total['ok'] / max(tried, 1):7.1%}")
    print(f"{len(per_op)} ops; ok rate = ok / (ok + refused + crash + WRONG)")
    return 1 if total["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
