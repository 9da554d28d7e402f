"""`python -m compiler.sweep ARGS`: the same as `neuronc sweep ARGS`."""

import argparse
import sys

from compiler.errors import NeuroncError
from compiler.sweep.cli import add_sweep_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler.sweep")
    parser.set_defaults(verbose=False)
    sub = parser.add_subparsers(dest="command", required=True)
    add_sweep_parser(sub)
    args = parser.parse_args(["sweep", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except NeuroncError as e:
        print(f"neuronc sweep: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("neuronc sweep: interrupted (run the same command again to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
