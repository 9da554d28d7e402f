"""Sweeps over models x compile options, on a local process pool or Ray (`neuronc sweep`, docs/plugins.md).

    from compiler.sweep import ModelSpec, Sweep, LocalExecutor, run_sweep, parse_grid
    sweep = Sweep([ModelSpec.from_file("examples/mlp.py")], parse_grid(["fusion=none,greedy"]))
    report = run_sweep(sweep, "out/sweep", LocalExecutor(workers=2))
"""

from compiler.sweep.executors import Executor, LocalExecutor
from compiler.sweep.grid import ModelSpec, PluginSpec, Point, Sweep, SweepError, parse_grid
from compiler.sweep.run import SweepReport, run_sweep

__all__ = ["Executor", "LocalExecutor", "ModelSpec", "PluginSpec", "Point", "Sweep", "SweepError", "SweepReport",
           "parse_grid", "run_sweep"]
