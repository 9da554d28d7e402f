"""The expanders (compiler/passes/expand) on HLO that XLA wrote (the conformance corpus): the rewritten module
computes jax's numbers in the interpreter, and the op the backend cannot lower is gone."""

from __future__ import annotations

from compiler.passes.control.call_inliner import CallInliner
from compiler.passes.expand.arg_reduce_expander import ArgReduceExpander, comparator_kind
from compiler.passes.expand.conv_lhs_dilation_expander import ConvLhsDilationExpander
from compiler.passes.expand.dynamic_slice_expander import DynamicSliceExpander
from compiler.passes.expand.gather_expander import GatherExpander
from compiler.passes.expand.integer_dot_expander import IntegerDotExpander
from compiler.passes.expand.scatter_expander import ScatterExpander
from hlo.interpreter import evaluate
from hlo.parser import parse_module
from hlo.verifier import verify_module
from tests.xla_corpus.corpus import load_case, mismatch


def _expanded(name: str, *passes):
    case = load_case(name)
    module = parse_module(case.hlo)
    for p in (CallInliner(), *passes):
        p.run(module)
    verify_module(module)
    assert mismatch(evaluate(module, case.inputs), case.outputs) is None
    return module


def test_argmax_argmin_become_two_plain_reductions():
    module = _expanded("reduce_argmax_argmin", ArgReduceExpander())
    assert not [i for i in module.entry.instructions if i.opcode == "reduce" and len(i.operands) != 2]


def test_the_comparator_is_recognized_by_what_it_computes():
    module = parse_module(load_case("reduce_argmax_argmin").hlo)
    kinds = sorted(k for c in module.computations if (k := comparator_kind(c, "f32")) is not None)
    assert kinds == ["max", "max", "min", "min"]  # argmax and argmin, of a matrix and of a vector
    sort = parse_module(load_case("sort_argsort_stable").hlo)
    assert all(comparator_kind(c, "s32") is None for c in sort.computations)


def test_transposed_convolution_becomes_pad_and_plain_convolution():
    module = _expanded("conv_transposed", ConvLhsDilationExpander())
    (conv,) = [i for i in module.entry.instructions if i.opcode == "convolution"]
    assert conv.operands[0].opcode == "pad"
    assert all(d.lhs_dilate == 1 and d.pad_low == d.pad_high == 0 for d in conv.attrs["window"].dims)


def test_dynamic_slices_with_runtime_offsets_become_selects():
    for name in ("dynamic_slice", "dynamic_update_slice", "dynamic_index_embedding"):
        module = _expanded(name, DynamicSliceExpander(defer_to_backend=False))
        assert not [i for i in module.entry.instructions if i.opcode.startswith("dynamic")]
        # by default the pass leaves them to the backend's indirect DMA
        assert not DynamicSliceExpander().run(parse_module(load_case(name).hlo))


def test_dynamic_slices_with_many_offsets_are_left_alone():
    module = parse_module(load_case("dynamic_slice").hlo)
    assert not DynamicSliceExpander(max_candidates=4).run(module)


def test_scatters_with_every_combiner_become_masked_updates():
    for name in ("scatter_set", "scatter_add", "scatter_mul", "scatter_min", "scatter_max", "scatter_add_s32_2d"):
        module = _expanded(name, ScatterExpander(defer_to_backend=False))
        assert not [i for i in module.entry.instructions if i.opcode == "scatter"], name


def test_short_8_bit_integer_dots_run_in_fp32_exactly_and_wide_ones_become_limb_dots():
    module = _expanded("dot_s8_to_s32", IntegerDotExpander())
    assert [i.shape.dtype for i in module.entry.instructions if i.opcode == "dot"] == ["f32"]
    module = _expanded("dot_s32", IntegerDotExpander())
    dots = [i.shape.dtype for i in module.entry.instructions if i.opcode == "dot"]
    assert set(dots) == {"f32"} and len(dots) % 10 == 0  # 10 limb dots (i + j < 4) per contraction chunk


def test_gathers_with_batching_or_several_index_dims_become_selects():
    for name in ("gather_two_index_dims", "gather_batching_dims", "gather_take_along_axis"):
        module = _expanded(name, GatherExpander(defer_to_backend=False))
        assert not [i for i in module.entry.instructions if i.opcode == "gather"], name
    module = parse_module(load_case("gather_take").hlo)
    CallInliner().run(module)
    assert not GatherExpander().run(module)  # one indexed dim: the backend's gather kernel
