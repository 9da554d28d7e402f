"""`neuronc`: the command line, shaped like AWS's neuronx-cc (see design.md, CLI)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from compiler import driver, options
from compiler.lazy import lazy_import
from compiler.model_files import load_model_file
from compiler.sweep.cli import add_sweep_parser
from hlo.errors import NeuroncError
from isa import neff
from isa.checks import CHECKS
from isa.dtypes import dtype as isa_dtype
from isa.errors import InputError, IsaError

# Loaded by the commands that use them: a compile-cache hit of an HLO file imports neither torch nor the backend
autotune = lazy_import("compiler.autotune")
frontend = lazy_import("frontend")
asm = lazy_import("isa.asm")

EXIT_ERROR = 1  # bad input: the message says what and where
EXIT_INTERNAL = 3  # a bug of neuronc (argparse uses 2 for usage errors)
EXIT_INTERRUPTED = 130


def _add_compile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile a model to a .neff")
    p.add_argument("model", help="a .py file defining get_model(), a .pt2 ExportedProgram or a .hlo file")
    p.add_argument("-o", "--output", help="output .neff (default: MODEL's name with .neff)")
    p.add_argument("--entry", default="get_model", help="function of a .py model file to call")
    options.add_arguments(p)
    p.add_argument("--autotune", action="store_true",
                   help="choose each GEMM/conv shape's tiling and buffering on the emulator's timing (kept in the "
                        "cache folder; the dump's autotune.txt says what and why)")
    p.add_argument("--autotune-workers", type=int, metavar="N", help="parallel autotune trials (default: cores)")
    p.add_argument("--autotune-ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the autotune trials as Ray tasks (local instance, or the cluster at ADDRESS)")
    p.add_argument("--retune", action="store_true", help="with --autotune: ignore the choices already stored")
    p.set_defaults(func=cmd_compile)


def _add_run_and_profile(sub: argparse._SubParsersAction) -> None:
    for name, func, help_text in (("run", cmd_run, "run a .neff on the emulator"),
                                  ("profile", cmd_profile, "run with timing and print the profile")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("neff")
        src = p.add_mutually_exclusive_group()
        src.add_argument("--inputs", nargs="+", metavar="NPY", help="one .npy file per input, in order")
        src.add_argument("--random", action="store_true", help="random inputs (the default)")
        p.add_argument("--seed", type=_seed, default=0, help="seed of the --random inputs (>= 0)")
        p.add_argument("--check", action="store_true", help="checked mode: races and uninitialized reads "
                                                                "(the same as --checks full)")
        p.add_argument("--checks", choices=CHECKS, default=None,
                       help="off: no machine-rule checks (fastest; for programs the compiler produced); rules: "
                            "every rule checked at decode (default); full: also races and uninitialized reads")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        if name == "run":
            p.add_argument("--output", help="write the outputs to this .npz")
        else:
            p.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
            p.add_argument("--json", help="write the profile figures as JSON here")
            p.add_argument("--by", choices=("op", "layer"), default="op",
                           help="table rows: HLO ops (fusions) or torch module paths (default: op)")
            p.add_argument("--top", type=_positive, default=20, help="rows shown in the table (default 20)")
            p.add_argument("--depth", type=_positive, default=None,
                           help="--by layer: module path components kept (h.0.attn.c_attn at 2 is h.0)")
            p.add_argument("--csv", help="write every row of the --by table as CSV here")
            p.add_argument("--html", help="write the self-contained HTML report here")
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


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; seeds are integers >= 0")
    return value


def _positive(text: str) -> int:
    value = _seed(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not a positive integer")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neuronc", description="PyTorch to simulated NeuronCore compiler")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_compile(sub)
    _add_run_and_profile(sub)
    _add_tools(sub)
    add_sweep_parser(sub)
    for command in sub.choices.values():  # --verbose is accepted after the command too
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="show tracebacks on errors")
    return parser


def cmd_compile(args: argparse.Namespace) -> int:
    output = args.output or str(Path(args.model).with_suffix(".neff").name)
    check_writable(output, "the output .neff")
    if args.dump_dir and Path(args.dump_dir).exists() and not Path(args.dump_dir).is_dir():
        raise NeuroncError(f"--dump-dir {args.dump_dir} exists and is not a folder")
    with driver.collector_paused():  # the model file's imports and model: long-lived objects by the million
        model, example_inputs, example_kwargs = load_model_file(args.model, args.entry)
    if not args.verbose and "torch" in sys.modules:  # an HLO file never loads torch
        quiet_torch()
    compile_options = options.from_arguments(args)
    if args.autotune:
        compile_options = autotune.autotune_options(args.model, compile_options, args.entry, args.autotune_workers,
                                           args.autotune_ray, args.retune)
    # the model is this process's own and never changes: the program may share its weights' memory
    exe = driver.compile_options(model, example_inputs, compile_options, example_kwargs, detach=False)
    exe.save(output, weights=compile_options.weights)
    target, instructions, inputs, outputs = exe.summary()  # a cache hit's program is never decoded
    stats = exe.compile_stats
    if stats is not None and stats.cache.startswith("hit") and not compile_options.quiet:
        print(f"neuronc: compile cache {stats.cache}", file=sys.stderr)
    print(f"compiled {args.model} for {target}: {instructions} instructions, "
          f"{inputs} input(s), {outputs} output(s) -> {output}")
    if args.timing:
        print(exe.pass_timing)
    if args.time_passes and stats is not None:
        print(stats.table())
    return 0


def _inputs(exe, args: argparse.Namespace) -> list[np.ndarray]:
    """The --inputs arrays (checked against the program's inputs, naming the file), or random inputs."""
    if not args.inputs:
        return exe.random_inputs(args.seed)
    specs = exe.input_specs()
    if len(args.inputs) != len(specs):
        listing = ", ".join(f"{n}: {d}{list(s)}" for n, d, s in specs) or "none"
        raise InputError(f"the program takes {len(specs)} input(s) ({listing}), got {len(args.inputs)} "
                         f"--inputs file(s)")
    return [_load_input(path, spec) for path, spec in zip(args.inputs, specs, strict=True)]


def _load_input(path: str, spec: tuple[str, str, tuple[int, ...]]) -> np.ndarray:

    name, dt, shape = spec
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"{path}: cannot read as a .npy array ({_os_text(e)})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        array.close()
        raise InputError(f"{path}: is an .npz archive; --inputs takes one .npy file per input")
    want = isa_dtype(dt).numpy
    if array.dtype != want and array.dtype.itemsize == want.itemsize and array.dtype.kind in "Vu" \
            and want.kind not in "iub":
        array = array.view(want)  # bf16/fp8 saved as raw bits (np.save writes them as void or uint)
    if tuple(array.shape) != tuple(shape):
        raise InputError(f"{path}: input {name} must have shape {list(shape)}, the file holds {list(array.shape)}")
    if array.dtype != want:
        raise InputError(f"{path}: input {name} must be {dt} ({want}), the file holds {array.dtype}")
    return array


def cmd_run(args: argparse.Namespace) -> int:
    if args.output:
        check_writable(args.output, "--output")
    exe = driver.load(args.neff)
    outputs, _ = exe.run_program_inputs(_inputs(exe, args), check=args.check, checks=args.checks,
                                        progress=not args.quiet)
    for name, value in zip(exe.program.outputs, outputs, strict=True):
        finite = value.astype(np.float64)
        print(f"{name}: {value.dtype}{list(value.shape)}  mean={finite.mean():.6g} "
              f"min={finite.min():.6g} max={finite.max():.6g}")
    if args.output:
        arrays = dict(zip(exe.program.outputs, outputs, strict=True))
        write_atomic(args.output, lambda f: np.savez(f, **arrays))
        print(f"wrote {args.output}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:


    for path, what in ((args.trace, "--trace"), (args.json, "--json"), (args.csv, "--csv"), (args.html, "--html")):
        if path:
            check_writable(path, what)
    exe = driver.load(args.neff)
    _, prof = exe.run_program_inputs(_inputs(exe, args), check=args.check, checks=args.checks,
                                     progress=not args.quiet)
    print(prof.summary())
    print()
    print(prof.table(args.by, top=args.top, depth=args.depth))
    if args.csv:
        text = prof.csv(args.by, depth=args.depth).encode()
        write_atomic(args.csv, lambda f: f.write(text))
        print(f"wrote {args.csv}")
    if args.html:
        size = prof.save_html(args.html, depth=args.depth, title=f"neuronc profile: {Path(args.neff).name}")
        print(f"wrote {args.html} ({size / 1e6:.2f} MB)")
    if args.trace:
        prof.save_trace(args.trace)
        print(f"wrote trace {args.trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    if args.json:
        text = json.dumps(prof.to_dict(), indent=2).encode()
        write_atomic(args.json, lambda f: f.write(text))
    return 0


def cmd_asm(args: argparse.Namespace) -> int:

    check_writable(args.output, "the output .neff")
    check_utf8(args.source, "an ISA text file")
    program = asm.load_asm_file(args.source)
    try:
        driver.load_target(program.target)
    except NeuroncError as e:
        raise NeuroncError(f"{args.source}: .target {program.target}: {e}") from None
    neff.save(program, args.output)
    print(f"assembled {args.source}: {len(program.instructions)} instructions -> {args.output}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:

    if args.output:
        check_writable(args.output, "the output text")
    program = neff.load(args.neff)
    if args.output:
        asm.save_asm_file(program, args.output)
    else:
        sys.stdout.write(asm.print_program(program))
    return 0


def cmd_list_operators(args: argparse.Namespace) -> int:
    if not args.verbose:
        quiet_torch()

    ops = frontend.supported_operators()
    print("\n".join(ops))
    print(f"({len(ops)} operators)", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (NeuroncError, IsaError) as e:
        return _fail(args, type(e).__name__, str(e), EXIT_ERROR)
    except OSError as e:
        return _fail(args, type(e).__name__, _os_text(e), EXIT_ERROR)
    except MemoryError:
        return _fail(args, "MemoryError", "out of memory (is the model too large for this machine?)", EXIT_ERROR)
    except KeyboardInterrupt:
        print(f"neuronc {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - a bug of neuronc: say so, without a traceback unless --verbose
        return _fail(args, "internal error", f"{type(e).__name__}: {e} (this is a bug in neuronc; please report "
                     f"it with the --verbose output)", EXIT_INTERNAL)


def _fail(args: argparse.Namespace, kind: str, message: str, status: int) -> int:
    if args.verbose:
        traceback.print_exc()
    print(f"neuronc {args.command}: error: {kind}: {_printable(message)}", file=sys.stderr)
    if not args.verbose:
        print("(run with --verbose for a traceback)", file=sys.stderr)
    return status


def _printable(text: str) -> str:
    """Control characters (from binary input echoed in a message) as escapes, so the terminal stays sane."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def _os_text(e: BaseException) -> str:
    """'PATH: reason' for an OSError (no errno, no temp-file names), else the message."""
    if isinstance(e, OSError) and e.strerror:
        path = e.filename2 if isinstance(e, IsADirectoryError) and e.filename2 else e.filename
        return f"{path}: {e.strerror}" if path else e.strerror
    return str(e)


def check_writable(path: str, what: str) -> None:
    """Refuse, before any work, an output path that cannot be written: missing folder, or a folder itself."""
    target = Path(path)
    if target.is_dir():
        raise NeuroncError(f"{what} {path} is a directory")
    parent = target.parent
    if not parent.is_dir():
        raise NeuroncError(f"{what} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise NeuroncError(f"{what} {path}: the folder {parent} is not writable")


def check_utf8(path: str, what: str) -> None:
    try:
        Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise NeuroncError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                           f"expected {what}") from None


def write_atomic(path: str, write) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, then rename it over ``path`` (no partial file)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def quiet_torch() -> None:
    """Silence torch's own error logging (it logs tracebacks of failed meta kernels during export); the
    failure reaches the user as one clear error. --verbose keeps it."""
    import torch  # noqa: F401 - torch configures its loggers on import; quiet them afterwards

    logging.getLogger("torch").setLevel(logging.CRITICAL)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
