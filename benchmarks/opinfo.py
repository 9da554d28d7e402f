"""OpInfo survey: PyTorch's own op samples (torch.testing._internal.common_methods_invocations.op_db) of the
inference ops the frontend supports, for every dtype torch gives them, compiled and run on the emulator and
compared with torch eager on CPU.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/opinfo.py [--samples 2] [--ops add,sin] [--dtypes int64,float16]
        [-j 2] [--json out.jsonl] [-v]

Per sample: ``ok`` (exact for integers and bool; fp32 within rtol/atol 1e-4, f16/bf16 2e-2; topk's indices,
whose order among equal values torch leaves unspecified, must be distinct and hold the values), ``refused`` (a
typed NeuroncError at compile time), ``crash`` (anything else), ``WRONG`` (ran, other numbers). Prints the
rate of ok over all samples tried, per dtype and in total, and the failures grouped by category (status and
message with numbers and names taken out). Each (op, dtype) pair is seeded on its own, so a subset run
(``--ops``/``--dtypes``) gives the samples the whole survey gives; ``-j N`` runs pairs in N processes.
Needs the dev extra (expecttest).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import warnings
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
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
        full = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        if only and op.name not in only and full not in only:
            continue
        if base in names or op.aten_name in names:
            yield op


def _op_by_key(name: str, variant: str):
    from torch.testing._internal.common_methods_invocations import op_db

    return next(op for op in op_db if op.name == name and op.variant_test_name == variant)


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


def compare_topk(got: list[np.ndarray], want: list[torch.Tensor], sample) -> str | None:
    """torch.topk leaves the order of equal values' indices unspecified (CPU: a partial sort): the values must
    match, and the indices must be distinct positions along the dim that hold exactly those values."""
    why = compare(got[:1], want[:1])
    if why or len(got) != 2:
        return why or f"{len(got)} outputs, torch gives 2"
    x = sample.input.detach()
    x = x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
    idx = np.asarray(got[1]).astype(np.int64)
    if x.ndim == 0:
        return None if np.all(idx == 0) else "out1: index of a 0-d input is not 0"
    if idx.shape != tuple(want[1].shape) or idx.min(initial=0) < 0 or idx.max(initial=0) >= x.shape[dim]:
        return "out1: indices out of range"
    picked = np.take_along_axis(x, idx, axis=dim)
    values = want[0].detach().float().numpy() if want[0].dtype == torch.bfloat16 else want[0].detach().numpy()
    if not np.array_equal(picked, values, equal_nan=x.dtype.kind == "f"):
        return "out1: indices do not point at the top-k values"
    ordered = np.sort(idx, axis=dim)
    if np.any(np.diff(ordered, axis=dim) == 0):
        return "out1: an index repeats"
    return None


# ops whose index outputs torch leaves unspecified among equal values: checked for validity instead
UNORDERED_TIES = {"topk": compare_topk}


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
    why = UNORDERED_TIES[op.name](got, flat, sample) if op.name in UNORDERED_TIES else compare(got, flat)
    return ("WRONG", why) if why else ("ok", "")


def run_pair(name: str, variant: str, dtype_name: str, samples: int) -> list[dict]:
    """Every sample (up to ``samples``) of one OpInfo entry in one dtype, seeded by the pair alone."""
    torch.set_num_threads(1)
    op, dtype = _op_by_key(name, variant), getattr(torch, dtype_name)
    torch.manual_seed(zlib.crc32(f"{name}.{variant}.{dtype_name}".encode()))
    try:
        inputs = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples]
    except Exception:  # noqa: BLE001 - some sample generators need more than CPU
        return []
    out = []
    for i, sample in enumerate(inputs):
        status, why = run_sample(op, sample)
        out.append({"op": op.name if not variant else f"{op.name}.{variant}", "dtype": dtype_name, "sample": i,
                    "status": status, "why": why})
    return out


def category(record: dict) -> str:
    """A failure's category: its status and message with numbers, shapes and quoted names taken out."""
    why = re.sub(r"computation %\S+: | at \S+\.py:\d+", "", record["why"])
    why = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", why)
    why = re.sub(r"%[\w.\-]+", "%_", why)
    why = re.sub(r"\b[a-z]+\d*\[[^\]]*\]", "T[_]", why)
    why = re.sub(r"\(line \d+\)|\d+(\.\d+)?(e[-+]?\d+)?", "N", why)
    return f"{record['status']}: {why[:110]}"


def summarize(records: list[dict], top: int) -> dict[str, float]:
    statuses = ("ok", "refused", "crash", "WRONG", "skipped")
    per_dtype: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        per_dtype[r["dtype"]][r["status"]] += 1
    print(f"\n{'dtype':10s} " + " ".join(f"{s:>8s}" for s in statuses) + "   ok rate")
    total: Counter = Counter()
    rates = {}
    for dt, c in sorted(per_dtype.items()):
        total.update(c)
        tried = sum(c[s] for s in statuses if s != "skipped")
        rates[dt] = c["ok"] / max(tried, 1)
        print(f"{dt:10s} " + " ".join(f"{c[s]:8d}" for s in statuses) + f"   {rates[dt]:7.1%}")
    tried = sum(total[s] for s in statuses if s != "skipped")
    rates["TOTAL"] = total["ok"] / max(tried, 1)
    print(f"{'TOTAL':10s} " + " ".join(f"{total[s]:8d}" for s in statuses) + f"   {rates['TOTAL']:7.1%}")
    print(f"{len({r['op'] for r in records})} ops; ok rate = ok / (ok + refused + crash + WRONG)")
    failures = Counter(category(r) for r in records if r["status"] not in ("ok", "skipped"))
    if failures:
        print(f"\nfailures by category (top {top} of {len(failures)}):")
        for cat, n in failures.most_common(top):
            ops = sorted({r["op"] for r in records if r["status"] not in ("ok", "skipped") and category(r) == cat})
            print(f"{n:5d}  {cat}\n       ops: {', '.join(ops[:12])}{' ...' if len(ops) > 12 else ''}")
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2, help="samples per op and dtype")
    ap.add_argument("--op", action="append", default=[], help="only this OpInfo name (repeatable)")
    ap.add_argument("--ops", default="", help="only these OpInfo names, comma-separated")
    ap.add_argument("--dtypes", default="", help="only these dtypes, comma-separated (e.g. int64,float16)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--json", help="write one JSON record per sample to this file")
    ap.add_argument("--top", type=int, default=25, help="failure categories to print")
    ap.add_argument("--rerun-failing", metavar="JSONL",
                    help="re-run only the (op, dtype) pairs (of --ops/--dtypes) with a sample not ok in this earlier "
                         "--json file; the other pairs' records are carried over from it (a quick after-figure)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    only = args.op + [o for o in args.ops.split(",") if o]
    wanted = {getattr(torch, d) for d in args.dtypes.split(",") if d} or set(DTYPES)
    unknown = wanted - set(DTYPES)
    if unknown:
        ap.error(f"dtypes not surveyed: {sorted(map(str, unknown))}")
    pairs = [(op.name, op.variant_test_name, str(dt).removeprefix("torch."), args.samples)
             for op in selected_ops(only or None) for dt in DTYPES
             if dt in wanted and dt in op.supported_dtypes("cpu")]
    records: list[dict] = []
    if args.rerun_failing:
        earlier = [json.loads(line) for line in Path(args.rerun_failing).read_text().splitlines() if line]
        failing = {(r["op"], r["dtype"]) for r in earlier if r["status"] not in ("ok", "skipped")}
        pairs = [p for p in pairs if ((f"{p[0]}.{p[1]}" if p[1] else p[0]), p[2]) in failing]
        rerun = {((f"{p[0]}.{p[1]}" if p[1] else p[0]), p[2]) for p in pairs}
        records = [r for r in earlier if (r["op"], r["dtype"]) not in rerun]
        print(f"re-running {len(pairs)} (op, dtype) pairs; {len(records)} samples carried over from "
              f"{args.rerun_failing}", flush=True)
    sink = open(args.json, "w") if args.json else None  # noqa: SIM115 - written as pairs finish (a long survey
    _write(sink, records)                                   # interrupted still leaves its records)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = pool.map(run_pair, *zip(*pairs, strict=True)) if pairs else []
            for batch in results:
                records.extend(batch)
                _write(sink, batch)
                _report(batch, args.verbose)
    else:
        for pair in pairs:
            batch = run_pair(*pair)
            records.extend(batch)
            _write(sink, batch)
            _report(batch, args.verbose)
    if sink is not None:
        sink.close()
    summarize(records, args.top)
    return 1 if any(r["status"] == "WRONG" for r in records) else 0


def _write(sink, batch: list[dict]) -> None:
    if sink is not None:
        sink.write("".join(json.dumps(r) + "\n" for r in batch))
        sink.flush()


def _report(batch: list[dict], verbose: bool) -> None:
    for r in batch:
        if verbose and r["status"] not in ("ok", "skipped"):
            print(f"  {r['op']:28s} {r['dtype']:10s} {r['status']:8s} {r['why'][:150]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
