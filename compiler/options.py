"""Every option of a compilation, declared once.

`CompileOptions` is what `compiler.compile(**kwargs)` accepts, what the pass pipeline and the driver read, and
what `neuronc compile`'s flags are built from (`add_arguments` walks the fields): a new option is one field
here, with its flag, choices and help in the field's metadata.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.registry import MEMORY_PLANNERS, TILE_FIELDS, TILE_POLICIES
from backend.registry import SCHEDULERS as SCHEDULER_REGISTRY
from compiler.passes.fusion.registry import FUSION_STRATEGIES as FUSION_REGISTRY
from compiler.plugins import load_plugins, plugin_digests
from hlo.errors import NeuroncError

OPT_LEVELS = (0, 1, 2, 3)
AUTO_CASTS = ("none", "matmult", "all")
AUTO_CAST_TYPES = ("bf16", "fp8_e4m3")
FUSION_STRATEGIES = ("greedy", "cost", "none")  # the built-in ones; plug-ins register more (docs/plugins.md)
SCHEDULERS = ("list", "inorder")  # the ones --help names; backend/registry.py has them all
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
                          choices=FUSION_REGISTRY.names)
    scheduler: str = _option("list", "list: critical-path list scheduling; inorder: program order (for comparison)",
                             choices=SCHEDULER_REGISTRY.names)
    capture: str = _option("export", "how a torch model is captured", choices=CAPTURES)
    dump_dir: str | None = _option(None, "write IR after each pass, fusion decisions, memory plan, schedule, "
                                         "program.s")
    dump_pass_re: str | None = _option(None, "only dump after passes whose name matches this regex")
    verify_each: bool = _option(False, "run the HLO verifier after every pass")
    disabled_passes: tuple[str, ...] = _option((), "skip this pass (by name; repeatable)", flag="--disable-pass",
                                               repeat="NAME")
    timing: bool = _option(False, "print the time each pass took")
    # -- strategies and backend knobs (docs/plugins.md; every one can be swept: neuronc sweep --grid KEY=...) --
    plugins: tuple[str, ...] = _option((), "a Python file registering strategies (repeatable; docs/plugins.md)",
                                       flag="--plugin", repeat="FILE.py")
    tile_policy: str = _option("default", "how each GEMM/conv kernel is tiled", choices=TILE_POLICIES.names)
    memory_planner: str = _option("residency", "which tensors between kernels stay in SBUF (spill: none)",
                                  choices=MEMORY_PLANNERS.names)
    sbuf_budget: int = _option(0, "SBUF bytes per partition the program may use (0: all of the target's)")
    dma_queues: int = _option(16, "DMA queues the program may use (at most the target's)")
    buffers: int = _option(2, "rotating buffers of a GEMM's streamed operands (2: double, 3: triple, 4; one "
                              "buffer is refused: the dot kernel prefetches the next stationary block)")
    fusion_recompute_weight: float = _option(1.0, "cost fusion: recompute a producer inside a fusion when that "
                                                  "reads at most WEIGHT x the bytes of its value")
    unroll_trips: int = _option(16, "unroll while loops of a static trip count up to N (longer ones, and loops "
                                    "whose trip count depends on the data, run as a loop on chip)")
    roll_layers: bool = _option(False, "compile repeated layers once: a run of structurally identical layers "
                                       "(a transformer's blocks) becomes a loop over stacked weights "
                                       "(slower to run; docs/middle-end.md)")
    tile_overrides: str = _option("", "per-shape tile choices, JSON {shape key: {field: value}} (the "
                                      "autotuner's; see tiling.txt for the keys)", cli=False)
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
                "disabled_passes", "tile_policy", "memory_planner", "sbuf_budget", "dma_queues", "buffers",
                "fusion_recompute_weight", "tile_overrides", "unroll_trips", "roll_layers")

    def __post_init__(self) -> None:
        self.disabled_passes = tuple(self.disabled_passes)
        self.plugins = tuple(str(p) for p in self.plugins)
        if not isinstance(self.tile_overrides, str):
            self.tile_overrides = json.dumps(self.tile_overrides, sort_keys=True)
        load_plugins(self.plugins)  # before validation: a plug-in's names are valid choices
        self.validate()

    def validate(self) -> None:
        """Refuse a value outside its field's choices, or a --dump-pass-re that is not a regex."""
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            registered = callable(choices)  # names of a registry: plug-ins add more
            choices = choices() if registered else choices
            value = getattr(self, f.name)
            if choices is not None and value not in choices:
                if f.name == "opt_level":
                    raise PassOptionError(f"-O{value}: optimization level must be one of 0, 1, 2, 3")
                more = " (a plug-in file, --plugin FILE.py, can register more)" if registered else ""
                raise PassOptionError(f"{f.name}={value!r} is not one of {', '.join(map(str, choices))}{more}")
        for name, lo, hi in (("sbuf_budget", 0, None), ("dma_queues", 1, None), ("buffers", 2, 4),
                             ("unroll_trips", 0, None)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < lo or (hi and value > hi):
                bound = f" and <= {hi}" if hi else ""
                raise PassOptionError(f"{name}={value!r}: expected an integer >= {lo}{bound}")
        if not isinstance(self.fusion_recompute_weight, int | float) or self.fusion_recompute_weight < 0:
            raise PassOptionError(f"fusion_recompute_weight={self.fusion_recompute_weight!r}: expected a number >= 0")
        self.tile_choices()
        if self.dump_pass_re is not None:
            try:
                re.compile(self.dump_pass_re)
            except re.error as e:
                raise PassOptionError(f"--dump-pass-re {self.dump_pass_re!r} is not a valid regex: {e}") from e

    def semantic(self) -> dict[str, Any]:
        """The options that change the compiled program, by name (part of the compile cache's key)."""
        values = {name: getattr(self, name) for name in self.SEMANTIC}
        values["plugins"] = plugin_digests(self.plugins)  # a plug-in's code changes the program, not its path
        return values

    def tile_choices(self) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
        """tile_overrides as BackendOptions.tile_overrides (checked: known fields, integer values)."""
        if not self.tile_overrides:
            return ()
        try:
            table = json.loads(self.tile_overrides)
        except json.JSONDecodeError as e:
            raise PassOptionError(f"tile_overrides is not JSON ({e})") from None
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise PassOptionError("tile_overrides must map a shape key to {field: value}")
        for key, choice in table.items():
            for name, value in choice.items():
                if name not in TILE_FIELDS or not isinstance(value, int):
                    raise PassOptionError(f"tile_overrides[{key!r}]: {name}={value!r} is not a tile field with an "
                                          f"integer value ({', '.join(TILE_FIELDS)})")
        return tuple((k, tuple(sorted(v.items()))) for k, v in sorted(table.items()))

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
        choices = meta.get("choices")
        if choices is not None:  # checked by validate(), whose typed error names the choices
            choices = choices() if callable(choices) else choices
            help_text += f" ({', '.join(map(str, choices))}; default {f.default})"
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text}
        if f.type in ("bool", bool):
            kwargs["action"] = "store_false" if f.default else "store_true"
        elif f.type in ("int", "float"):
            kwargs.update(default=f.default, type=int if f.type == "int" else float)
        elif meta.get("repeat"):
            kwargs.update(action="append", default=[], metavar=meta["repeat"])
        else:
            kwargs["default"] = f.default
        parser.add_argument(flag, **kwargs)


def from_arguments(args: argparse.Namespace) -> CompileOptions:
    """The CompileOptions that parsed command-line arguments (from `add_arguments`) ask for."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(CompileOptions) if hasattr(args, f.name)}
    return make_options(**values)
