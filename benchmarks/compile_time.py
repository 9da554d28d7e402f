"""Compile time per model and depth: CPU and wall seconds of `compiler.compile` (cache off) and of its phases,
one compile per row, in this process; with `--write`, the .neff write too (to a temporary folder, weights
`auto`, as `neuronc compile` writes them), in the `cpu`/`wall` totals and its own column.

    PYTHONPATH=. python benchmarks/compile_time.py gpt2:2 gpt2:12      # examples/gpt2.py at 2 and 12 layers
    PYTHONPATH=. python benchmarks/compile_time.py llama resnet50       # each example at its full size
    PYTHONPATH=. python benchmarks/compile_time.py benchmarks/hf_gpt2_small.py
    PYTHONPATH=. python benchmarks/compile_time.py --write llama                # + the .neff and weights write
    PYTHONPATH=. python benchmarks/compile_time.py --roll-layers gpt2:2 gpt2:12  # repeated layers as one loop

A spec is an example name or a model file, optionally `:LAYERS` (examples' get_model(layers=...)). The phases
shown are the backend's (lowering (survey), lowering, scheduling) and capture; `passes` sums the HLO passes.
CPU seconds are the figure to compare on a shared machine (wall includes waiting for the cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.driver import compile_options  # noqa: E402
from compiler.model_files import load_model_file  # noqa: E402
from compiler.options import make_options  # noqa: E402

PHASES = ("capture", "lowering (survey)", "lowering", "scheduling")


def load(spec: str) -> tuple:
    """(model, args, kwargs) of `name[:layers]` (an example) or `path.py[:layers]`; the depth reaches the
    examples through NEURONC_EXAMPLE_LAYERS and benchmarks/hf_gpt2_small.py through GPT2_LAYERS."""
    name, _, layers = spec.partition(":")
    path = name if name.endswith(".py") else str(ROOT / "examples" / f"{name}.py")
    for var in ("NEURONC_EXAMPLE_LAYERS", "GPT2_LAYERS"):
        os.environ.pop(var, None)
        if layers:
            os.environ[var] = layers
    return load_model_file(path)


def measure(spec: str, write: bool = False, roll_layers: bool = False) -> dict[str, float]:
    model, args, kwargs = load(spec)
    cpu, wall = time.process_time(), time.perf_counter()
    options = make_options(cache=False, quiet=True, roll_layers=roll_layers)
    # as `neuronc compile`: the model is not changed afterwards, so its weights need no copy
    exe = compile_options(model, args, options, kwargs, detach=False)
    if write:
        with tempfile.TemporaryDirectory(dir=ROOT) as folder:
            exe.save(Path(folder) / "model.neff")
    row = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
           "instructions": float(len(exe.program.instructions))}
    phases = exe.compile_stats.phases
    row["passes"] = sum(p.cpu_seconds for p in phases if p.kind == "pass")
    for name in (*PHASES, ".neff write"):
        row[name] = sum(p.cpu_seconds for p in phases if p.name == name)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="example name or model file, optionally :LAYERS")
    parser.add_argument("--write", action="store_true", help="also write the .neff and its weights (timed)")
    parser.add_argument("--roll-layers", action="store_true", help="compile with roll_layers (repeated layers "
                        "as one loop)")
    args = parser.parse_args(argv)
    cols = ("cpu", "wall", "capture", "passes", *PHASES[1:], *((".neff write",) if args.write else ()))
    print(f"{'model':<32} {'instr':>8} " + " ".join(f"{c[:16]:>17}" for c in cols) + "   (seconds; phases in CPU s)")
    for spec in args.models:
        row = measure(spec, args.write, args.roll_layers)
        print(f"{spec:<32} {int(row['instructions']):>8} " + " ".join(f"{row[c]:>17.2f}" for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
