"""The pass manager: pipelines per -O level, disabling, verify_each, fixed points, timing and dumps."""

from __future__ import annotations

import re

import numpy as np
import pytest

from compiler.errors import CompilationError, VerificationError
from compiler.options import CompileOptions, PassOptionError
from compiler.passes.interface import HloPass
from compiler.pipeline import FixedPoint, PassPipeline, build_pipeline
from hlo.io import load_hlo_file
from hlo.ir import Module, Shape
from hlo.printer import print_module
from tests.compiler.golden.harness import GOLDEN_DIR, evaluate, parse_with_constants, random_args


def mlp() -> Module:
    return parse_with_constants((GOLDEN_DIR / "mlp.in.hlo").read_text())


class Counting(HloPass):
    """Reports a change on its first ``changes`` runs."""

    def __init__(self, name: str, changes: int = 0):
        self.name, self.changes, self.calls = name, changes, 0

    def run(self, module: Module) -> bool:
        self.calls += 1
        return self.calls <= self.changes


class BreakRoot(HloPass):
    """A buggy pass: gives the ROOT a shape its operands do not produce."""

    name = "break_root"

    def run(self, module: Module) -> bool:
        root = module.entry.root
        root.shape = Shape.array(root.shape.dtype, (7,) + root.shape.dims)
        return True


class Crash(HloPass):
    name = "crash"

    def run(self, module: Module) -> bool:
        raise IndexError("list index out of range")


def top_level(opt_level: int, **options) -> list[str]:
    return [p.name for p in build_pipeline(opt_level, CompileOptions(**options)).passes]


def test_pipelines_per_level():
    control = ["call_inliner", "while_unroller", "conditional_to_select", "arg_reduce_expander",
               "conv_lhs_dilation_expander", "dynamic_slice_expander", "scatter_expander",
               "gather_expander", "integer_dot_expander", "reduce_window_expander"]
    assert top_level(0) == control + ["canonicalize", "auto_cast"]
    assert top_level(1) == control + ["canonicalize", "auto_cast", "simplification"]
    assert top_level(2) == top_level(3) == control + ["canonicalize", "auto_cast", "simplification", "channel_major",
                                                      "fusion"]
    assert top_level(2, fusion="none") == top_level(1)
    group = build_pipeline(1).passes[12]
    assert isinstance(group, FixedPoint)
    assert [p.name for p in group.passes] == ["constant_folding", "algebraic_simplifier", "cse", "dce"]


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_every_level_preserves_results(opt_level):
    before, after = mlp(), mlp()
    build_pipeline(opt_level, CompileOptions(verify_each=True)).run(after)
    args = random_args(before)
    np.testing.assert_allclose(evaluate(after, args)[0], evaluate(before, args)[0], rtol=1e-5, atol=1e-5)


def test_o2_output_is_two_fusions():
    module = mlp()
    build_pipeline(2).run(module)
    entry = [i.opcode for i in module.entry.instructions if i.opcode not in ("parameter", "constant")]
    assert entry == ["fusion", "fusion"]


@pytest.mark.parametrize("bad, message", [
    (dict(auto_cast="fp16"), "auto_cast='fp16' is not one of none, matmult, all"),
    (dict(auto_cast_type="int8"), "auto_cast_type='int8'"),
    (dict(fusion="eager"), "fusion='eager'"),
    (dict(dump_pass_re="("), "not a valid regex"),
])
def test_bad_options(bad, message):
    with pytest.raises(PassOptionError, match=re.escape(message)):
        CompileOptions(**bad)


def test_bad_opt_level():
    with pytest.raises(PassOptionError, match="-O4"):
        build_pipeline(4)


def test_disabled_pass_is_skipped():
    a, b = Counting("a", 1), Counting("b", 1)
    pipeline = PassPipeline("p", [a, b], CompileOptions(disabled_passes=("b",)))
    assert pipeline.run(mlp())
    assert (a.calls, b.calls) == (1, 0)
    assert re.search(r"^b\s+-\s+-\s+disabled", pipeline.timing_report(), re.M)


def test_disabling_a_group_skips_its_passes():
    inner = Counting("inner", 1)
    pipeline = PassPipeline("p", [FixedPoint("group", [inner])], CompileOptions(disabled_passes=("group",)))
    pipeline.run(mlp())
    assert inner.calls == 0


def test_unknown_disabled_pass_lists_the_known_ones():
    with pytest.raises(PassOptionError) as info:
        build_pipeline(2, CompileOptions(disabled_passes=("fusoin",)))
    message = str(info.value)
    assert "fusoin" in message
    for known in ("algebraic_simplifier", "auto_cast", "canonicalize", "constant_folding", "cse", "dce", "fusion"):
        assert known in message


def test_passes_of_other_levels_may_be_disabled():
    pipeline = build_pipeline(0, CompileOptions(disabled_passes=("fusion", "dce")))
    assert pipeline.run(mlp())


def test_verify_each_names_the_pass_that_broke_the_module(tmp_path):
    later = Counting("later")
    pipeline = PassPipeline("p", [Counting("fine", 1), BreakRoot(), later],
                            CompileOptions(verify_each=True, dump_dir=tmp_path))
    with pytest.raises(VerificationError, match=r"^after pass break_root: .*%out"):
        pipeline.run(mlp())
    assert later.calls == 0
    assert _dumps(tmp_path)[-1] == "module_0000.mlp.0002.after_break_root.hlo"  # the broken module, to inspect


def test_without_verify_each_a_broken_module_passes_through():
    PassPipeline("p", [BreakRoot()]).run(mlp())


def test_verify_each_checks_the_input_too():
    module = mlp()
    BreakRoot().run(module)
    with pytest.raises(VerificationError, match="^before the first pass: "):
        PassPipeline("p", [Counting("a")], CompileOptions(verify_each=True)).run(module)


def test_a_crashing_pass_is_named():
    with pytest.raises(CompilationError, match="pass crash failed on module mlp: IndexError"):
        PassPipeline("p", [Crash()]).run(mlp())


def test_fixed_point_runs_until_nothing_changes():
    a, b = Counting("a", 3), Counting("b", 1)
    pipeline = PassPipeline("p", [FixedPoint("fix", [a, b], max_iterations=10)])
    assert pipeline.run(mlp())
    assert (a.calls, b.calls) == (4, 4)  # three changing iterations, then one that changes nothing
    assert "fix (fixed point, 4 iter)" in pipeline.timing_report()


def test_fixed_point_stops_at_max_iterations():
    forever = Counting("forever", 100)
    pipeline = PassPipeline("p", [FixedPoint("fix", [forever], max_iterations=3)])
    pipeline.run(mlp())
    assert forever.calls == 3
    assert "note: fixed point fix stopped after max_iterations=3" in pipeline.timing_report()


@pytest.mark.parametrize("auto_cast", ["none", "matmult", "all"])
def test_optimized_module_is_a_fixed_point_of_its_pipeline(auto_cast):
    # so that compiling a final dump again (neuronc compile dump.hlo) gives the same HLO
    module = mlp()
    build_pipeline(2, CompileOptions(auto_cast=auto_cast)).run(module)
    text = print_module(module)
    assert not build_pipeline(2, CompileOptions(auto_cast=auto_cast)).run(module)
    assert print_module(module) == text


def test_timing_report_lists_every_pass():
    pipeline = build_pipeline(2)
    pipeline.run(mlp())
    report = pipeline.timing_report()
    for name in ("canonicalize", "auto_cast", "simplification", "algebraic_simplifier", "constant_folding",
                 "cse", "dce", "fusion", "total"):
        assert re.search(rf"^\s*{name}\b", report, re.M), name


def _dumps(directory) -> list[str]:
    return sorted(p.name for p in directory.glob("*.hlo"))


def test_dumps_are_numbered_parse_back_and_compile_alone(tmp_path):
    pipeline = build_pipeline(2, CompileOptions(dump_dir=tmp_path, auto_cast="matmult"))
    pipeline.run(mlp())
    names = _dumps(tmp_path)
    assert names[0] == "module_0000.mlp.0000.before_optimizations.hlo"
    assert [int(n.split(".")[2]) for n in names] == list(range(len(names)))
    assert all(re.fullmatch(r"module_0000\.mlp\.\d{4}\.after_[a-z_]+\.hlo", n) for n in names[1:])
    assert names[-1].endswith(".after_fusion.hlo")
    assert (tmp_path / "module_0000.mlp.constants.npz").exists()
    for name in names:
        assert print_module(load_hlo_file(tmp_path / name)) == (tmp_path / name).read_text(), name
    # a dump is a complete input: the first one, compiled again, gives the final module's text
    again = load_hlo_file(tmp_path / names[0])
    build_pipeline(2, CompileOptions(auto_cast="matmult")).run(again)
    final = load_hlo_file(tmp_path / names[-1])
    assert print_module(again) == print_module(final)


def test_by_default_only_changed_passes_are_dumped(tmp_path):
    pipeline = build_pipeline(2, CompileOptions(dump_dir=tmp_path))  # auto_cast=none changes nothing
    pipeline.run(mlp())
    changed = {r.name for r in pipeline.runs if r.changed}
    dumped = {n.split(".after_")[1][:-4] for n in _dumps(tmp_path)[1:]}
    assert dumped == changed and "auto_cast" not in dumped


def test_dump_pass_re_filters_and_dumps_unchanged_matches(tmp_path):
    build_pipeline(2, CompileOptions(dump_dir=tmp_path, dump_pass_re="^(auto_cast|fusion)$")).run(mlp())
    names = _dumps(tmp_path)
    assert [n.split(".", 3)[3] for n in names] == ["before_optimizations.hlo", "after_auto_cast.hlo",
                                                   "after_fusion.hlo"]


def test_fusion_decisions_file(tmp_path):
    build_pipeline(2, CompileOptions(dump_dir=tmp_path)).run(mlp())
    lines = (tmp_path / "fusion_decisions.txt").read_text().splitlines()
    assert lines[0].startswith("# fusion decisions")
    assert "FUSED   kOutput %dot1 -> %add1: bias add of broadcast %bias1" in lines
    build_pipeline(1, CompileOptions(dump_dir=tmp_path)).run(mlp())
    assert "no fusion was considered" in (tmp_path / "fusion_decisions.txt").read_text()


def test_a_pass_that_rewrites_constant_data_under_the_same_key_is_caught(tmp_path):
    class Scale(HloPass):
        name = "scale_in_place"

        def run(self, module: Module) -> bool:
            w = next(i for i in module.entry.instructions if i.name == "w1")
            w.literal = w.literal * 2
            return True

    with pytest.raises(CompilationError, match='constant "fc1.weight" changed'):
        PassPipeline("p", [Scale()], CompileOptions(dump_dir=tmp_path)).run(mlp())
