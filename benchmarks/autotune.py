"""The autotuner's gain on the benchmark suite: each model's default tiling against the tuned one.

    .venv/bin/python benchmarks/autotune.py --models gemm4096 mlp gpt2_block_s128 [--workers 2] [--ray]

For each model of benchmarks/models.py (compiled as benchmarks/run.py does: auto_cast from the case, -O2,
trn1), `compiler.autotune` searches every distinct GEMM/conv shape's tiling and buffering on the emulator's
timing (compile_s and the trials run on the sweep's executor). The tuning store is a fresh folder under
--out, so every run measures the search itself, not a cache hit. Writes OUT/autotune.md (the table) and
OUT/<model>.autotune.txt (every trial, what was chosen and why).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import by_name  # noqa: E402
from compiler.autotune import TuningStore, autotune  # noqa: E402
from compiler.sweep.cli import make_executor  # noqa: E402

MODEL_FILE = '''
"""The benchmark case {name!r} as a model file (written by benchmarks/autotune.py)."""
import sys

sys.path.insert(0, {root!r})
from benchmarks.models import by_name  # noqa: E402


def get_model():
    return by_name([{name!r}])[0].build()
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["gemm2048", "mlp", "gpt2_block_s128"])
    parser.add_argument("--out", default="out/autotune")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = str(Path(__file__).resolve().parent.parent)
    executor = make_executor(args.workers, args.ray)
    rows = []
    for case in by_name(args.models):
        model_file = out / f"{case.name}.py"
        model_file.write_text(textwrap.dedent(MODEL_FILE.format(name=case.name, root=root)))
        store = TuningStore(out / "store" / f"{case.name}.json")
        print(f"== {case.name}: {case.description}", flush=True)
        result = autotune(str(model_file), {"auto_cast": case.auto_cast}, executor, store=store, retune=True)
        (out / f"{case.name}.autotune.txt").write_text(result.report())
        changed = "; ".join(f"{s}: {','.join(f'{k}={v}' for k, v in c.items())}" for s, c in result.overrides.items())
        rows.append(f"| {case.name} | {len(result.shapes)} | {len(result.trials)} | {result.baseline_us:.1f} | "
                    f"{result.tuned_us:.1f} | {result.gain:.3f}x | {result.seconds:.0f} | {changed or 'default'} |")
        print(rows[-1], flush=True)
    table = ("| model | GEMM/conv shapes | programs emulated | default us | tuned us | gain | search s | chosen |\n"
             "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    (out / "autotune.md").write_text(table + "\n")
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
