"""Control flow on the ISA: a counted while loop run as one body on chip versus fully unrolled.

For each corpus case (default: the 300- and 1000-trip fori_loops and the data-dependent while loops), compiles
with the default pipeline (loops of more than 16 trips run as a loop on chip) and, when the trip count is static,
with ``unroll_trips`` raised so that the unroller expands the whole loop (the only way before the ISA had loops).
Prints per variant: program instructions, .neff bytes, compile wall time (best of --repeat, cache off), emulation
wall time, the emulated (simulated) time of the program, executed instructions, and whether the outputs match jax.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/control_flow.py [CASE ...] [--repeat 3] [--memory-planner spill]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import compiler  # noqa: E402
from hlo.parser import parse_module  # noqa: E402
from hlo.while_loop import trip_count  # noqa: E402
from isa import neff  # noqa: E402
from tests.xla_corpus.corpus import load_case, mismatch  # noqa: E402

DEFAULT_CASES = ("while_fori_long", "while_fori_1000", "while_dynamic", "while_doubling")


def measure(name: str, unroll: int, repeat: int, planner: str) -> dict[str, object]:
    case = load_case(name)
    best = float("inf")
    exe = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        exe = compiler.compile(case.hlo, opt_level=2, unroll_trips=unroll, cache=False, quiet=True,
                               memory_planner=planner)
        best = min(best, time.perf_counter() - t0)
    assert exe is not None
    t0 = time.perf_counter()
    got, profile = exe.run_with_profile(*case.inputs)
    emulate = time.perf_counter() - t0
    problem = mismatch([np.asarray(g) for g in got], case.outputs)
    return {"instructions": len(exe.program.instructions), "neff_bytes": len(neff.encode(exe.program)),
            "compile_s": best, "emulate_s": emulate, "simulated_us": profile.time_us,
            "executed": sum(profile.instruction_counts.values()), "matches": problem is None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", default=list(DEFAULT_CASES))
    ap.add_argument("--repeat", type=int, default=3, help="compiles per variant (the best time is shown)")
    ap.add_argument("--memory-planner", default="residency",
                    help="residency (default) or spill; the unrolled 300-trip loop does not finish residency "
                         "planning in 18 minutes")
    ap.add_argument("--no-unrolled", action="store_true", help="only the loop on chip")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(100_000)  # the unrolled variant: hlo/provenance.py recurses along the 300-deep chain
    header = (f"{'case':<18} {'variant':<10} {'instr':>8} {'.neff B':>10} {'compile s':>10} {'emulate s':>10} "
              f"{'simulated us':>13} {'executed':>9} match")
    print(header, flush=True)
    for name in args.cases:
        loops = [i for i in parse_module(load_case(name).hlo).all_instructions() if i.opcode == "while"]
        trips = max((trip_count(w) or 0 for w in loops), default=0)
        variants = [("loop", 16)] + ([("unrolled", trips)] if trips > 16 and not args.no_unrolled else [])
        for variant, unroll in variants:
            r = measure(name, unroll, args.repeat, args.memory_planner)
            print(f"{name:<18} {variant:<10} {r['instructions']:>8} {r['neff_bytes']:>10} {r['compile_s']:>10.2f} "
                  f"{r['emulate_s']:>10.2f} {r['simulated_us']:>13.1f} {r['executed']:>9} "
                  f"{'yes' if r['matches'] else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
