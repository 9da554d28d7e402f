"""A second compile of the same model in a new process, timed inside the process: `compiler.compile()`
alone, the model already built (what a torch.compile user or a test suite pays), cold and on a hit.

    .venv/bin/python benchmarks/compile_cache.py benchmarks/hf_gpt2_small.py --cache-dir /tmp/nc-cache

Runs three processes: a cold compile (cache off), a compile that stores the entry (cache on, empty
cache) and a compile that hits it. Each imports neuronc, torch (and transformers) and builds the model
before its clock starts, then times the one `compiler.compile(model, example_inputs)` call: CPU seconds
(`time.process_time`, the process's user + system) and wall seconds. That call includes what it imports
lazily (torch._dynamo, through torch.export or the fake tensors of the trace key). It prints each
one's times, the hit's phases (a hit by trace: `cache lookup (trace)` only) and the ratio hit / cold.

The whole `neuronc compile` process (imports, model building, compile, writing -o) is the other
definition: time it from outside with farm-bench, A = a hit, B = `--no-cache` (docs/speed.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _one(model_file: str, cache: bool) -> None:
    sys.path.insert(0, str(ROOT))
    import compiler  # noqa: PLC0415 (timed child: imports before the clock starts)
    from compiler.model_files import load_model_file  # noqa: PLC0415

    model, example, kwargs = load_model_file(model_file)
    cpu, wall = time.process_time(), time.perf_counter()
    exe = compiler.compile(model, example, example_kwargs=kwargs, cache=cache, quiet=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    stats = exe.compile_stats
    phases = {p.name: round(p.cpu_seconds, 3) for p in stats.phases} if stats is not None else {}
    print(json.dumps({"cpu": cpu, "wall": wall, "cache": stats.cache if stats else "", "phases": phases}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--cache-dir", required=True, help="an empty folder for the cache (removed first)")
    parser.add_argument("--child", choices=("cold", "cached"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _one(args.model, args.child == "cached")
        return 0
    shutil.rmtree(args.cache_dir, ignore_errors=True)
    env = {**os.environ, "NEURONC_CACHE_DIR": args.cache_dir}
    results = {}
    for label, child in (("cold (cache off)", "cold"), ("store (miss)", "cached"), ("hit", "cached")):
        out = subprocess.run([sys.executable, __file__, args.model, "--cache-dir", args.cache_dir, "--child", child],
                             env=env, capture_output=True, text=True, check=True).stdout
        results[label] = json.loads(out.strip().splitlines()[-1])
        r = results[label]
        print(f"{label:18s} compile() cpu {r['cpu']:7.3f} s  wall {r['wall']:7.3f} s  cache: {r['cache'][:40]}")
    hit, cold = results["hit"], results["cold (cache off)"]
    print("hit phases (cpu s):", ", ".join(f"{k} {v}" for k, v in hit["phases"].items()))
    print(f"hit / cold: cpu {hit['cpu'] / cold['cpu']:.3f}x, wall {hit['wall'] / cold['wall']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
