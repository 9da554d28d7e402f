"""Every option of a compilation, declared once.

`CompileOptions` is what `compiler.compile(**kwargs)` accepts, what the pass pipeline and the driver read, and
what `neuronc compile`'s flags are built from (`add_arguments` walks the fields): a new option is one field
here, with its flag, choices and help in the field's metadata.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlo.errors import NeuroncError

OPT_LEVELS = (0, 1, 2, 3)
AUTO_CASTS = ("none", "matmult", "all")
AUTO_CAST_TYPES = ("bf16", "fp8_e4m3")
FUSION_STRATEGIES = ("greedy", "cost", "none")
SCHEDULERS = ("list", "inorder")
CAPTURES = ("export", "fx")
WEIGHTS_MODES = ("auto", "inline", "external")  # as isa.neff.WEIGHTS_MODES


class PassOptionError(NeuroncError, ValueError):
    """An option is invalid (unknown pass name, bad auto-cast mode, bad regex...)."""


def _option(default: Any, help: str, *, choices: tuple[Any, ...] | None = None, flag: str | None = None,
            repeat: str | None = None, cli: bool = True) -> Any:
    """A dataclass field carrying its command-line form: ``flag`` (default: --field-name), ``choices``,
    ``repeat`` (the flag may be given several times; its one-value name), ``cli=False`` (API only)."""
    meta = {"help": help, "choices": choices, "flag": flag, "repeat": repeat, "cli": cli}
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable option defaults are not allowed")
    return field(default=default, metadata=meta)


@dataclass
class CompileOptions:
    """Everything that steers one compilation (the flags of `neuronc compile`, design.md)."""

    target: str = _option("trn1", "trn1, trn2 or a target JSON file")
    opt_level: int = _option(2, "optimization level (-O0..-O3)", choices=OPT_LEVELS, cli=False)
    auto_cast: str = _option("none", "cast matmul (or all) operands to --auto-cast-type", choices=AUTO_CASTS)
    auto_cast_type: str = _option("bf16", "the low-precision type of --auto-cast", choices=AUTO_CAST_TYPES)
    fusion: str = _option("greedy", "fusion strategy: greedy (producer-consumer), cost (cost-model driven), none",
                          choices=FUSION_STRATEGIES)
    scheduler: str = _option("list", "list: critical-path list scheduling; inorder: program order (for comparison)",
                             choices=SCHEDULERS)
    capture: str = _option("export", "how a torch model is captured", choices=CAPTURES)
    dump_dir: str | None = _option(None, "write IR after each pass, fusion decisions, memory plan, schedule, "
                                         "program.s")
    dump_pass_re: str | None = _option(None, "only dump after passes whose name matches this regex")
    verify_each: bool = _option(False, "run the HLO verifier after every pass")
    disabled_passes: tuple[str, ...] = _option((), "skip this pass (by name; repeatable)", flag="--disable-pass",
                                               repeat="NAME")
    timing: bool = _option(False, "print the time each pass took")
    time_passes: bool = _option(False, "print wall time and peak memory of every phase: capture, each pass, each "
                                       "backend phase, the cache, the .neff write")
    cache: bool = _option(True, "do not use the compile cache ($NEURONC_CACHE_DIR or ~/.cache/neuronc)",
                          flag="--no-cache")
    weights: str = _option("auto", "where the .neff's weights go: a safetensors side file beside it (external), "
                                   "inside it (inline), or external above 16 MiB (auto)",
                           choices=WEIGHTS_MODES)
    quiet: bool = _option(False, "no progress line on the terminal")

    # options that change the compiled program (the compile cache's key); the rest steer output only
    SEMANTIC = ("target", "opt_level", "auto_cast", "auto_cast_type", "fusion", "scheduler", "capture",
                "disabled_passes")

    def __post_init__(self) -> None:
        self.disabled_passes = tuple(self.disabled_passes)
        self.validate()

    def validate(self) -> None:
        """Refuse a value outside its field's choices, or a --dump-pass-re that is not a regex."""
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            if choices is not None and value not in choices:
                if f.name == "opt_level":
                    raise PassOptionError(f"-O{value}: optimization level must be one of 0, 1, 2, 3")
                raise PassOptionError(f"{f.name}={value!r} is not one of {', '.join(map(str, choices))}")
        if self.dump_pass_re is not None:
            try:
                re.compile(self.dump_pass_re)
            except re.error as e:
                raise PassOptionError(f"--dump-pass-re {self.dump_pass_re!r} is not a valid regex: {e}") from e

    def semantic(self) -> dict[str, Any]:
        """The options that change the compiled program, by name (part of the compile cache's key)."""
        return {name: getattr(self, name) for name in self.SEMANTIC}

    def replace(self, **changes: Any) -> CompileOptions:
        """A copy with some fields changed (validated like any CompileOptions)."""
        return dataclasses.replace(self, **changes)

    @property
    def dump_path(self) -> Path | None:
        return Path(self.dump_dir) if self.dump_dir is not None else None


def make_options(**kwargs: Any) -> CompileOptions:
    """CompileOptions from keyword arguments, naming an unknown one (``compiler.compile(**kwargs)``)."""
    known = {f.name for f in dataclasses.fields(CompileOptions)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise PassOptionError(f"unknown option(s) {', '.join(unknown)}; options are: {', '.join(sorted(known))}")
    return CompileOptions(**kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per command-line field of CompileOptions (-O0..-O3 for opt_level)."""
    for level in OPT_LEVELS:
        parser.add_argument(f"-O{level}", dest="opt_level", action="store_const", const=level)
    parser.set_defaults(opt_level=CompileOptions.opt_level)
    for f in dataclasses.fields(CompileOptions):
        meta = f.metadata
        if not meta.get("cli", True):
            continue
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        help_text = meta["help"]
        if meta.get("choices") is not None:  # checked by validate(), whose typed error names the choices
            help_text += f" ({', '.join(map(str, meta['choices']))}; default {f.default})"
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text}
        if f.type in ("bool", bool):
            kwargs["action"] = "store_false" if f.default else "store_true"
        elif meta.get("repeat"):
            kwargs.update(action="append", default=[], metavar=meta["repeat"])
        else:
            kwargs["default"] = f.default
        parser.add_argument(flag, **kwargs)


def from_arguments(args: argparse.Namespace) -> CompileOptions:
    """The CompileOptions that parsed command-line arguments (from `add_arguments`) ask for."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(CompileOptions) if hasattr(args, f.name)}
    return make_options(**values)
