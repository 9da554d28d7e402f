"""`neuronc sweep`: the command line of a sweep (compiler/cli.py adds it as a sub-command).

    neuronc sweep --models examples/mlp.py examples/convnet.py --grid fusion=none,greedy,cost \\
                  scheduler=inorder,list --out DIR [--ray [ADDRESS]] [--workers N] [--set auto_cast=matmult]
"""

from __future__ import annotations

import argparse
import sys

from compiler.sweep.executors import Executor, LocalExecutor
from compiler.sweep.grid import ModelSpec, PluginSpec, Sweep, SweepError, parse_grid
from compiler.sweep.ray_executor import RayExecutor
from compiler.sweep.run import run_sweep


def add_sweep_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("sweep", help="compile and profile models over a grid of options (local pool or Ray)",
                       description="Compile and profile every model at every point of the grid; write "
                                   "OUT/results.csv (resumable), OUT/pareto.png and OUT/bars_<model>.png.")
    p.add_argument("--models", nargs="+", required=True, metavar="MODEL.py",
                   help="model files defining get_model() -> (module, example_inputs)")
    p.add_argument("--grid", nargs="+", action="extend", default=[], metavar="KEY=V1,V2",
                   help="option values to sweep (any compile option: fusion, scheduler, opt_level, ...)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", dest="fixed",
                   help="options every point shares (e.g. auto_cast=matmult target=trn2)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder of results.csv and the charts")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the points as Ray tasks: a local Ray instance, or the cluster at ADDRESS")
    p.add_argument("--workers", type=_positive_int, help="parallel points (default: this machine's cores)")
    p.add_argument("--timeout", type=float, metavar="S", help="stop a point after S seconds (status timeout)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="a plug-in file every point loads (shipped to the workers)")
    p.add_argument("--entry", default="get_model", help="function of the model files to call")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the points results.csv has with a status other than ok")
    p.add_argument("--pareto-x", default="hbm", choices=["hbm", "sbuf"],
                   help="x axis of pareto.png: HBM traffic or peak SBUF")
    p.add_argument("--no-charts", action="store_true", help="write results.csv only")
    p.set_defaults(func=cmd_sweep)
    return p


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _fixed(words: list[str]) -> dict[str, str]:
    fixed = {}
    for key, values in parse_grid(words).items():
        if len(values) != 1:
            raise SweepError(f"--set {key}={','.join(values)}: one value only (a list belongs in --grid)")
        fixed[key] = values[0]
    return fixed


def make_executor(workers: int | None, ray_address: str | None) -> Executor:
    """The local process pool, or Ray (`ray_address` "" for a local instance) when it is not None."""
    if ray_address is None:
        return LocalExecutor(workers)
    return RayExecutor(ray_address or None, workers)


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.timeout is not None and args.timeout <= 0:
        raise SweepError(f"--timeout must be positive, got {args.timeout:g}")
    sweep = Sweep(models=[ModelSpec.from_file(m, args.entry) for m in args.models], grid=parse_grid(args.grid),
                  fixed=_fixed(args.fixed), plugins=[PluginSpec.from_file(p) for p in args.plugin],
                  timeout_s=args.timeout)
    report = run_sweep(sweep, args.out, make_executor(args.workers, args.ray), retry_failed=args.retry_failed,
                       charts=not args.no_charts, pareto_axis=args.pareto_x)
    bad = report.not_ok
    print(f"{len(report.rows)} points ({report.resumed} resumed, {report.ran} run, {len(bad)} not ok): "
          + ", ".join(str(f) for f in report.files))
    for row in bad:
        print(f"  {row['model']} {'/'.join(row.get(k, '') for k in sweep.option_names)}: {row['status']}: "
              f"{row.get('error', '')}", file=sys.stderr)
    return 0
