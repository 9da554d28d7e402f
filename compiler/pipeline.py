"""Pass pipelines: fixed-point groups, the runner, and the -O level recipes.

Modeled on XLA's ``HloPassPipeline`` / ``HloPassFix`` (the pass interface is in passes/interface.py):

* a :class:`PassPipeline` runs passes in order; a :class:`FixedPoint` group re-runs its passes until none of
  them changes the module (or ``max_iterations`` is reached);
* around every pass the pipeline can verify the module (``verify_each``), time it, and dump it.

Dump policy (mirrors XLA's ``--xla_dump_hlo_pass_re``): the module is always dumped once before the first
pass. With the default ``dump_pass_re=None`` a pass is dumped only when it reported a change, so the dump
directory reads as the sequence of transformations. When a regex is given, every pass whose name matches it is
dumped after each run, changed or not, so that one can confirm a pass ran and did nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.dump import HloDumper
from compiler.options import OPT_LEVELS, CompileOptions, PassOptionError
from compiler.passes.control.call_inliner import CallInliner
from compiler.passes.control.conditional_to_select import ConditionalToSelect
from compiler.passes.control.layer_roller import LayerRoller
from compiler.passes.control.while_unroller import WhileUnroller
from compiler.passes.expand.arg_reduce_expander import ArgReduceExpander
from compiler.passes.expand.conv_lhs_dilation_expander import ConvLhsDilationExpander
from compiler.passes.expand.dynamic_slice_expander import DynamicSliceExpander
from compiler.passes.expand.gather_expander import GatherExpander
from compiler.passes.expand.integer_dot_expander import IntegerDotExpander
from compiler.passes.expand.reduce_window_expander import ReduceWindowExpander
from compiler.passes.expand.scatter_expander import ScatterExpander
from compiler.passes.fusion.channel_major import ChannelMajor
from compiler.passes.fusion.fusion_pass import FusionPass
from compiler.passes.interface import HloPass, RecordsDecisions
from compiler.passes.precision.auto_cast import AutoCastPass
from compiler.passes.simplify.algebraic_simplifier import AlgebraicSimplifier
from compiler.passes.simplify.canonicalize import Canonicalize
from compiler.passes.simplify.constant_folding import ConstantFolding
from compiler.passes.simplify.cse import CommonSubexpressionElimination
from compiler.passes.simplify.dce import DeadCodeElimination
from compiler.stats import peak_rss_bytes, reset_peak
from hlo.errors import CompilationError, NeuroncError, VerificationError
from hlo.ir import Module
from hlo.verifier import verify_module


class FixedPoint:
    """A group of passes run repeatedly until an iteration changes nothing (XLA's ``HloPassFix``)."""

    def __init__(self, name: str, passes: Sequence[HloPass | FixedPoint], max_iterations: int = 8):
        if max_iterations < 1:
            raise PassOptionError(f"fixed-point group {name!r}: max_iterations must be >= 1")
        self.name = name
        self.passes = list(passes)
        self.max_iterations = max_iterations

    def __repr__(self) -> str:
        return f"<FixedPoint {self.name} x{self.max_iterations}: {[p.name for p in self.passes]}>"


PassLike = HloPass | FixedPoint


@dataclass
class PassRun:
    """One execution of one pass: for the timing report."""

    name: str
    group: str | None  # the FixedPoint group it ran in, if any
    iteration: int
    seconds: float
    changed: bool
    peak_bytes: int = 0  # resident-memory high-water mark during the run (compiler.stats)
    cpu_seconds: float = 0.0


class PassPipeline:
    """Runs passes in order, with optional verification, timing and dumps after each one."""

    def __init__(self, name: str, passes: Sequence[PassLike], options: CompileOptions | None = None,
                 also_known: Sequence[str] = ()):
        """``also_known``: pass names ``--disable-pass`` accepts although they are not in this pipeline."""
        self.name = name
        self.passes = list(passes)
        self.options = options or CompileOptions()
        self.runs: list[PassRun] = []
        self.decision_lines: list[str] = []
        self.notes: list[str] = []  # e.g. a fixed point that did not converge
        self.total_seconds = 0.0
        known = self.pass_names() | set(also_known)
        unknown = [n for n in self.options.disabled_passes if n not in known]
        if unknown:
            raise PassOptionError(
                f"--disable-pass: unknown pass name(s) {', '.join(unknown)}; "
                f"known passes: {', '.join(sorted(known))}")
        self._dump_re = re.compile(self.options.dump_pass_re) if self.options.dump_pass_re else None
        self._dumper: HloDumper | None = None
        self.progress: Callable[[str], None] | None = None  # told the name of each pass as it starts

    # -- introspection -------------------------------------------------------------------------------------
    def pass_names(self) -> set[str]:
        """Every pass and group name in the pipeline (what ``--disable-pass`` accepts)."""
        names: set[str] = set()

        def walk(items: Sequence[PassLike]) -> None:
            for p in items:
                names.add(p.name)
                if isinstance(p, FixedPoint):
                    walk(p.passes)

        walk(self.passes)
        return names

    def is_disabled(self, pass_: PassLike) -> bool:
        return pass_.name in self.options.disabled_passes

    # -- running -------------------------------------------------------------------------------------------
    def run(self, module: Module) -> bool:
        """Run the whole pipeline on ``module`` in place; return True if any pass changed it."""
        self.runs.clear()
        self.decision_lines.clear()
        self.notes.clear()
        start = time.perf_counter()
        self._dumper = None
        if self.options.dump_dir is not None:
            self._dumper = HloDumper(self.options.dump_dir, module.name)
            self._dumper.dump(module, "before_optimizations")
        if self.options.verify_each:
            self._verify(module, "before the first pass")
        try:
            changed = self._run_list(module, self.passes, group=None, iteration=0)
        finally:
            self.total_seconds = time.perf_counter() - start
            if self._dumper is not None:
                self._dumper.write_decisions(self.decision_lines)
        return changed

    def _run_list(self, module: Module, passes: Sequence[PassLike], group: str | None, iteration: int) -> bool:
        changed = False
        for p in passes:
            if self.is_disabled(p):
                continue
            if isinstance(p, FixedPoint):
                changed |= self._run_fixed_point(module, p)
            else:
                changed |= self._run_one(module, p, group, iteration)
        return changed

    def _run_fixed_point(self, module: Module, group: FixedPoint) -> bool:
        changed = False
        for iteration in range(group.max_iterations):
            if not self._run_list(module, group.passes, group.name, iteration):
                break
            changed = True
        else:
            self.notes.append(f"fixed point {group.name} stopped after max_iterations={group.max_iterations} "
                              "while its passes were still changing the module")
        return changed

    def _run_one(self, module: Module, p: HloPass, group: str | None, iteration: int) -> bool:
        if self.progress is not None:
            self.progress(p.name)
        reset_peak()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            changed = bool(p.run(module))
        except NeuroncError:
            raise
        except Exception as e:  # a bug in a pass: name the pass, keep the cause for --verbose
            raise CompilationError(f"pass {p.name} failed on module {module.name}: "
                                   f"{type(e).__name__}: {e}") from e
        self.runs.append(PassRun(p.name, group, iteration, time.perf_counter() - start, changed, peak_rss_bytes(),
                                 time.process_time() - cpu))
        if isinstance(p, RecordsDecisions):
            self.decision_lines.extend(p.decision_lines())
        if self._dumper is not None and self._should_dump(p.name, changed):
            self._dumper.dump(module, f"after_{p.name}")  # before verifying, so a broken module is on disk
        if self.options.verify_each:
            self._verify(module, f"after pass {p.name}")
        return changed

    def _should_dump(self, pass_name: str, changed: bool) -> bool:
        if self._dump_re is None:
            return changed
        return self._dump_re.search(pass_name) is not None

    @staticmethod
    def _verify(module: Module, when: str) -> None:
        try:
            verify_module(module)
        except VerificationError as e:
            raise VerificationError(f"{when}: {e}") from e

    # -- reporting -----------------------------------------------------------------------------------------
    def timing_report(self) -> str:
        """A table of wall time per pass (summed over fixed-point iterations), in pipeline order."""
        rows: list[tuple[str, str, str, str, str]] = []
        total = self.total_seconds or sum(r.seconds for r in self.runs) or 1e-12

        def add_rows(items: Sequence[PassLike], indent: str, group: str | None) -> None:
            for p in items:
                label = indent + p.name
                if self.is_disabled(p):
                    rows.append((label, "-", "-", "disabled", ""))
                    continue
                if isinstance(p, FixedPoint):
                    iters = {r.iteration for r in self.runs if r.group == p.name}
                    secs = sum(r.seconds for r in self.runs if r.group == p.name)
                    rows.append((label + f" (fixed point, {len(iters)} iter)", "", "",
                                 f"{secs * 1e3:.3f}", f"{100 * secs / total:.1f}%"))
                    add_rows(p.passes, indent + "  ", p.name)
                    continue
                mine = [r for r in self.runs if r.name == p.name and r.group == group]
                secs = sum(r.seconds for r in mine)
                rows.append((label, str(len(mine)), str(sum(r.changed for r in mine)),
                             f"{secs * 1e3:.3f}", f"{100 * secs / total:.1f}%"))

        add_rows(self.passes, "", None)
        overhead = max(self.total_seconds - sum(r.seconds for r in self.runs), 0.0)
        rows.append(("(verification, dumps)", "", "", f"{overhead * 1e3:.3f}", f"{100 * overhead / total:.1f}%"))
        header = ("pass", "runs", "changed", "time (ms)", "share")
        rows.append(("total", str(len(self.runs)), str(sum(r.changed for r in self.runs)),
                     f"{self.total_seconds * 1e3:.3f}", "100.0%"))
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
        lines = [f"HLO pass pipeline {self.name}"]
        for i, r in enumerate([header, *rows]):
            if i == len(rows):  # separator before the total
                lines.append("-" * (sum(widths) + 8))
            lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def build_pipeline(opt_level: int, options: CompileOptions | None = None) -> PassPipeline:
    """The HLO pipeline for ``-O<opt_level>``.

    * O0: ``call_inliner``, ``while_unroller``, ``conditional_to_select``, ``arg_reduce_expander``,
      ``conv_lhs_dilation_expander``, ``dynamic_slice_expander``, ``scatter_expander``,
      ``gather_expander``, ``integer_dot_expander``, ``reduce_window_expander``, ``canonicalize``, ``auto_cast`` --
      only what lowering needs (the backend lowers straight-line computations: XLA writes a ``call`` per jitted
      helper; counted loops of at most ``--unroll-trips`` (16) trips unroll, longer and data-dependent loops run
      on chip (the ISA's loops); cheap conditionals compute every branch and select, others branch; argmax
      and argmin become two plain reductions; a convolution's base dilation becomes a pad; dynamic slices with
      few possible offsets become selects, and so do gathers with few possible indices; scatters with few
      update positions become masked updates; 8-bit
      integer dots whose sums stay below 2^24 run on PE in fp32; reduce-windows over more than two windowed
      dimensions become a chain over at most two each).
    * O1: + the ``simplification`` fixed point (``constant_folding``, ``algebraic_simplifier``, ``cse``,
      ``dce``). Folding goes first so that a transpose of a weight is folded into the constant (a transposed
      copy made at compile time) rather than into the dot's contracting dims (a strided read at run time);
      CSE follows the simplifier, whose rewrites make more expressions identical.
    * O2 (default), O3: + ``channel_major`` (channel-last LayerNorm/MLP regions of a CNN, permuted NCHW -> NHWC
      and back, run channel-major: no transposes) and ``fusion`` with the strategy ``fusion`` names (``greedy``,
      ``cost``; ``none`` leaves both out). Fusion removes what it fuses, so no DCE follows it. O3 currently
      equals O2; it is the place for passes that trade compile time for speed.

    ``--disable-pass`` accepts any pass name of any level (disabling ``fusion`` at -O1 is a no-op, not an
    error), so one command line works across levels.
    """
    options = options or CompileOptions(opt_level=opt_level)
    if opt_level not in OPT_LEVELS:
        raise PassOptionError(f"-O{opt_level}: optimization level must be one of 0, 1, 2, 3")
    passes: list[PassLike] = [CallInliner(), WhileUnroller(options.unroll_trips), ConditionalToSelect(),
                              ArgReduceExpander(),
                              ConvLhsDilationExpander(), DynamicSliceExpander(), ScatterExpander(),
                              GatherExpander(), IntegerDotExpander(), ReduceWindowExpander(), Canonicalize(),
                              AutoCastPass(options.auto_cast, options.auto_cast_type)]
    if opt_level >= 1:
        passes.append(FixedPoint("simplification",
                                 [ConstantFolding(), AlgebraicSimplifier(), CommonSubexpressionElimination(),
                                  DeadCodeElimination()],
                                 max_iterations=8))
    if options.roll_layers:
        passes.append(LayerRoller())
    if opt_level >= 2 and options.fusion != "none":
        passes.append(ChannelMajor("bf16" if options.auto_cast != "none" else None))
        passes.append(FusionPass(strategy=options.fusion, recompute_weight=options.fusion_recompute_weight))
    every_pass = ["call_inliner", "while_unroller", "conditional_to_select", "arg_reduce_expander",
                  "conv_lhs_dilation_expander", "dynamic_slice_expander", "scatter_expander",
                  "gather_expander", "integer_dot_expander", "reduce_window_expander", "canonicalize",
                  "auto_cast",
                  "simplification", "algebraic_simplifier",
                  "constant_folding", "cse", "dce", "roll_layers", "channel_major", "fusion"]
    return PassPipeline(f"O{opt_level}", passes, options, also_known=every_pass)
