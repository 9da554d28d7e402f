"""Survey of the XLA conformance corpus (tests/xla_corpus): for every case, the interpreter, then the compiled
program at -O0..-O3 on the emulator, against jax's outputs.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/xla_corpus.py [--levels 0,1,2,3] [--family F] [--verbose]

Per stage a case is ``ok`` (matches jax), ``refused`` (a typed NeuroncError before it ran: parse, verify,
compile), ``crash`` (any other exception, or an error while running) or ``WRONG`` (ran and gave other numbers
than jax). Prints one row per family and the totals; exits 1 if any stage is WRONG.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler.errors import NeuroncError  # noqa: E402
from tests.xla_corpus.corpus import Case, load_all, mismatch  # noqa: E402

STATUSES = ("ok", "refused", "crash", "WRONG")


def interpret(case: Case) -> tuple[str, str]:
    from hlo.interpreter import evaluate
    from hlo.parser import parse_module
    from hlo.verifier import verify_module

    try:
        module = parse_module(case.hlo, source=f"{case.name}.hlo")
        verify_module(module)
    except NeuroncError as e:
        return "refused", str(e).splitlines()[0]
    try:
        with np.errstate(all="ignore"):
            got = evaluate(module, case.inputs)
    except Exception as e:  # noqa: BLE001 - the survey classifies every failure
        return "crash", f"{type(e).__name__}: {e}".splitlines()[0]
    why = mismatch(got, case.outputs)
    return ("WRONG", why) if why else ("ok", "")


def compiled(case: Case, level: int) -> tuple[str, str]:
    import compiler

    try:
        exe = compiler.compile(case.hlo, opt_level=level)
    except NeuroncError as e:
        return "refused", f"{type(e).__name__}: {e}".splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return "crash", f"compile: {type(e).__name__}: {e}".splitlines()[0]
    try:
        with np.errstate(all="ignore"):
            got = exe.run(*case.inputs)
    except Exception as e:  # noqa: BLE001
        return "crash", f"run: {type(e).__name__}: {e}".splitlines()[0]
    why = mismatch(got, case.outputs)
    return ("WRONG", why) if why else ("ok", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="0,1,2,3", help="optimization levels to compile at")
    ap.add_argument("--family", action="append", help="only these families")
    ap.add_argument("--case", action="append", help="only these cases")
    ap.add_argument("--verbose", "-v", action="store_true", help="one line per case and stage that is not ok")
    ap.add_argument("--traceback", action="store_true", help="print tracebacks of crashes")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    cases = [c for c in load_all() if (not args.family or c.family in args.family)
             and (not args.case or c.name in args.case)]
    stages = ["interp"] + [f"O{lv}" for lv in levels]
    table: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    sizes: Counter = Counter()
    for case in cases:
        sizes[case.family] += 1
        results = {"interp": interpret(case)}
        for lv in levels:
            try:
                results[f"O{lv}"] = compiled(case, lv)
            except BaseException:
                if args.traceback:
                    traceback.print_exc()
                raise
        for stage, (status, why) in results.items():
            table[case.family][stage][status] += 1
            if args.verbose and status != "ok":
                print(f"  {case.name:40s} {stage:6s} {status:7s} {why[:160]}")
    print(f"\n{'family':18s} {'cases':>5s}  " + "  ".join(f"{s:^23s}" for s in stages))
    print(f"{'':18s} {'':>5s}  " + "  ".join(" ok  ref crash WRONG   " for _ in stages))
    total: dict[str, Counter] = defaultdict(Counter)
    for fam in sorted(table):
        cells = []
        for s in stages:
            c = table[fam][s]
            total[s].update(c)
            cells.append(" ".join(f"{c[k]:4d}" for k in STATUSES) + "   ")
        print(f"{fam:18s} {sizes[fam]:5d}  " + "  ".join(cells))
    print(f"{'TOTAL':18s} {len(cases):5d}  " + "  ".join(" ".join(f"{total[s][k]:4d}" for k in STATUSES) + "   "
                                                      for s in stages))
    return 1 if any(total[s]["WRONG"] for s in stages) else 0


if __name__ == "__main__":
    sys.exit(main())
