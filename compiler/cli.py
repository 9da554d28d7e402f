"""`neuronc`: the command line, shaped like AWS's neuronx-cc (see design.md, CLI)."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from compiler.errors import NeuroncError
from isa.errors import IsaError

EXIT_ERROR = 1


def _add_compile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile a model to a .neff")
    p.add_argument("model", help="a .py file defining get_model(), a .pt2 ExportedProgram or a .hlo file")
    p.add_argument("-o", "--output", help="output .neff (default: MODEL's name with .neff)")
    p.add_argument("--entry", default="get_model", help="function of a .py model file to call")
    p.add_argument("--target", default="trn1", help="trn1, trn2 or a target JSON file")
    for level in range(4):
        p.add_argument(f"-O{level}", dest="opt_level", action="store_const", const=level)
    p.add_argument("--auto-cast", default="none", choices=["none", "matmult", "all"])
    p.add_argument("--auto-cast-type", default="bf16", choices=["bf16", "fp8_e4m3"])
    p.add_argument("--fusion", default="greedy", help="fusion strategy (none, greedy)")
    p.add_argument("--scheduler", default="list", choices=["list", "inorder"],
                   help="list: critical-path list scheduling; inorder: program order (for comparison)")
    p.add_argument("--capture", default="export", choices=["export", "fx"])
    p.add_argument("--dump-dir", help="write IR after each pass, fusion decisions, memory plan, schedule, program.s")
    p.add_argument("--dump-pass-re", help="only dump after passes whose name matches this regex")
    p.add_argument("--verify-each", action="store_true", help="run the HLO verifier after every pass")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME")
    p.add_argument("--timing", action="store_true", help="print the time each pass took")
    p.set_defaults(func=cmd_compile, opt_level=None)


def _add_run_and_profile(sub: argparse._SubParsersAction) -> None:
    for name, func, help_text in (("run", cmd_run, "run a .neff on the emulator"),
                                  ("profile", cmd_profile, "run with timing and print the profile")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("neff")
        src = p.add_mutually_exclusive_group()
        src.add_argument("--inputs", nargs="+", metavar="NPY", help="one .npy file per input, in order")
        src.add_argument("--random", action="store_true", help="random inputs (the default)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--check", action="store_true", help="checked mode: races and uninitialized reads")
        if name == "run":
            p.add_argument("--output", help="write the outputs to this .npz")
        else:
            p.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
            p.add_argument("--json", help="write the profile figures as JSON here")
        p.set_defaults(func=func)


def _add_tools(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("asm", help="assemble ISA text into a .neff")
    p.add_argument("source")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_asm)
    p = sub.add_parser("disasm", help="print the ISA text of a .neff")
    p.add_argument("neff")
    p.add_argument("-o", "--output", help="write the text (and its constants side file) here")
    p.set_defaults(func=cmd_disasm)
    p = sub.add_parser("list-operators", help="list the supported PyTorch (ATen) operators")
    p.set_defaults(func=cmd_list_operators)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neuronc", description="PyTorch to simulated NeuronCore compiler")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_compile(sub)
    _add_run_and_profile(sub)
    _add_tools(sub)
    return parser


def cmd_compile(args: argparse.Namespace) -> int:
    from compiler import driver
    from compiler.model_files import load_model_file

    model, example_inputs = load_model_file(args.model, args.entry)
    exe = driver.compile(model, example_inputs, target=args.target,
                         opt_level=2 if args.opt_level is None else args.opt_level,
                         auto_cast=args.auto_cast, dump_dir=args.dump_dir, auto_cast_type=args.auto_cast_type,
                         dump_pass_re=args.dump_pass_re, verify_each=args.verify_each,
                         disabled_passes=tuple(args.disable_pass), fusion=args.fusion, capture=args.capture,
                         scheduler=args.scheduler)
    output = args.output or str(Path(args.model).with_suffix(".neff").name)
    exe.save(output)
    program = exe.program
    print(f"compiled {args.model} for {program.target}: {len(program.instructions)} instructions, "
          f"{len(program.inputs)} input(s), {len(program.outputs)} output(s) -> {output}")
    if args.timing:
        print(exe.pass_timing)
    return 0


def _inputs(exe, args: argparse.Namespace) -> list[np.ndarray]:
    if not args.inputs:
        return exe.random_inputs(args.seed)
    arrays = []
    for path in args.inputs:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as e:
            raise NeuroncError(f"{path}: cannot read as a .npy array ({e})") from None
    return arrays


def cmd_run(args: argparse.Namespace) -> int:
    from compiler import driver

    exe = driver.load(args.neff)
    outputs = exe.run(*_inputs(exe, args), check=args.check, progress=True)
    for name, value in zip(exe.program.outputs, outputs, strict=True):
        finite = value.astype(np.float64)
        print(f"{name}: {value.dtype}{list(value.shape)}  mean={finite.mean():.6g} "
              f"min={finite.min():.6g} max={finite.max():.6g}")
    if args.output:
        np.savez(args.output, **dict(zip(exe.program.outputs, outputs, strict=True)))
        print(f"wrote {args.output}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    import json

    from compiler import driver

    exe = driver.load(args.neff)
    prof = exe.profile(*_inputs(exe, args), check=args.check, progress=True)
    print(prof.summary())
    if args.trace:
        prof.save_trace(args.trace)
        print(f"wrote trace {args.trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    if args.json:
        Path(args.json).write_text(json.dumps(prof.to_dict(), indent=2))
    return 0


def cmd_asm(args: argparse.Namespace) -> int:
    from isa import neff
    from isa.asm import load_asm_file

    program = load_asm_file(args.source)
    neff.save(program, args.output)
    print(f"assembled {args.source}: {len(program.instructions)} instructions -> {args.output}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from isa import neff
    from isa.asm import print_program, save_asm_file

    program = neff.load(args.neff)
    if args.output:
        save_asm_file(program, args.output)
    else:
        sys.stdout.write(print_program(program))
    return 0


def cmd_list_operators(args: argparse.Namespace) -> int:
    from frontend import supported_operators

    ops = supported_operators()
    print("\n".join(ops))
    print(f"({len(ops)} operators)", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (NeuroncError, IsaError, OSError) as e:
        if args.verbose:
            traceback.print_exc()
        kind = type(e).__name__
        print(f"neuronc {args.command}: error: {kind}: {e}", file=sys.stderr)
        if not args.verbose:
            print("(run with --verbose for a traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
