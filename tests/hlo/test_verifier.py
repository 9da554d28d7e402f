"""The verifier and shape inference: a valid module of every opcode passes, each kind of error is named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.errors import VerificationError
from hlo.ir import Computation, Instruction, Module, Shape
from hlo.parser import parse_module
from hlo.shape_inference import ShapeInferenceError, format_padding, infer_shape, parse_padding
from hlo.verifier import verify_module

DATA = Path(__file__).parent / "data"

EVERY_OP = """\
HloModule every_op

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}

%fused (p0: f32[4,6], p1: f32[6]) -> f32[4,6] {
  %p0 = f32[4,6]{1,0} parameter(0)
  %p1 = f32[6]{0} parameter(1)
  %bc = f32[4,6]{1,0} broadcast(f32[6]{0} %p1), dimensions={1}
  ROOT %sum = f32[4,6]{1,0} add(f32[4,6]{1,0} %p0, f32[4,6]{1,0} %bc)
}

ENTRY %main (x: f32[4,6], v: f32[6], h: bf16[2,4,6]) -> (f32[4,6], f32[2,4,4], f32[6,4]) {
  %x = f32[4,6]{1,0} parameter(0)
  %v = f32[6]{0} parameter(1)
  %h = bf16[2,4,6]{2,1,0} parameter(2)
  %zero = f32[] constant(0)
  %one = f32[] constant(1)
  %io = s32[4,6]{1,0} iota(), iota_dimension=1
  %cv = f32[4,6]{1,0} convert(s32[4,6]{1,0} %io)
  %e = f32[4,6]{1,0} exponential(f32[4,6]{1,0} %x)
  %cmp = pred[4,6]{1,0} compare(f32[4,6]{1,0} %x, f32[4,6]{1,0} %cv), direction=LT
  %sel = f32[4,6]{1,0} select(pred[4,6]{1,0} %cmp, f32[4,6]{1,0} %x, f32[4,6]{1,0} %e)
  %cl = f32[4,6]{1,0} clamp(f32[] %zero, f32[4,6]{1,0} %sel, f32[] %one)
  %rs = f32[24]{0} reshape(f32[4,6]{1,0} %cl)
  %tr = f32[6,4]{1,0} transpose(f32[4,6]{1,0} %x), dimensions={1,0}
  %sl = f32[2,3]{1,0} slice(f32[4,6]{1,0} %x), slice={[0:4:2], [1:6:2]}
  %cat = f32[4,9]{1,0} concatenate(f32[4,6]{1,0} %x, f32[4,3]{1,0} %pd), dimensions={1}
  %pd = f32[4,3]{1,0} pad(f32[2,3]{1,0} %sl, f32[] %zero), padding=1_1x0_0
  %rd = f32[4]{0} reduce(f32[4,6]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%max
  %dt = f32[2,4,4]{2,1,0} dot(bf16[2,4,6]{2,1,0} %h, bf16[2,4,6]{2,1,0} %h), lhs_batch_dims={0}, \
lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  %fu = f32[4,6]{1,0} fusion(f32[4,6]{1,0} %x, f32[6]{0} %v), kind=kLoop, calls=%fused
  %g = f32[4,6]{1,0} custom-call(f32[4,6]{1,0} %fu), custom_call_target="gelu"
  %t = (f32[4,6]{1,0}, f32[4]{0}) tuple(f32[4,6]{1,0} %g, f32[4]{0} %rd)
  %gte = f32[4,6]{1,0} get-tuple-element((f32[4,6]{1,0}, f32[4]{0}) %t), index=0
  ROOT %out = (f32[4,6]{1,0}, f32[2,4,4]{2,1,0}, f32[6,4]{1,0}) tuple(f32[4,6]{1,0} %gte, \
f32[2,4,4]{2,1,0} %dt, f32[6,4]{1,0} %tr)
}
"""


def _fixed(text: str) -> str:
    """EVERY_OP defines %pd after %cat uses it; put it first (the parser accepts either order)."""
    lines = text.splitlines(keepends=True)
    pd = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("%pd ="))
    cat = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("%cat ="))
    lines.insert(cat, lines.pop(pd))
    return "".join(lines)


def test_valid_modules_pass():
    verify_module(parse_module(_fixed(EVERY_OP)))
    fused = parse_module((DATA / "mlp_fusion.hlo").read_text(), constants={
        "fc1.weight": np.zeros((300, 100), np.float32)})
    verify_module(fused)


def test_use_before_definition():
    with pytest.raises(VerificationError, match=r"computation %main: %cat \(concatenate\): operand 1 %pd is "
                                                r"defined after its use"):
        verify_module(parse_module(EVERY_OP))


def _module(body: str, params: str = "x: f32[4,6]") -> Module:
    lines = [f"  %{p.split(':')[0].strip()} = {p.split(':')[1].strip()} parameter({i})"
             for i, p in enumerate(params.split(", "))]
    text = "HloModule m\n\n" + MAX_COMP + "ENTRY %main {\n" + "\n".join(lines) + "\n" + body + "\n}\n"
    return parse_module(text)


MAX_COMP = """%max {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

"""


@pytest.mark.parametrize("body, params, message", [
    ("ROOT %r = f32[4,6] add(%x, %y)", "x: f32[4,6], y: f32[4,7]",
     "%r (add): operand 1 is f32[4,7] but operand 0 is f32[4,6]"),
    ("ROOT %r = f32[4,6] add(%x, %y)", "x: f32[4,6], y: s32[4,6]", "operand 1 is s32[4,6] but operand 0"),
    ("ROOT %r = f32[4,7] negate(%x)", "x: f32[4,6]", "declared f32[4,7] but the operands give f32[4,6]"),
    ("ROOT %r = s32[4,6] exponential(%x)", "x: s32[4,6]", "operand type s32 is not allowed"),
    ("ROOT %r = pred[4,6] compare(%x, %x)", "x: f32[4,6]", "direction=None is not one of EQ"),
    ("ROOT %r = f32[4,6] compare(%x, %x), direction=EQ", "x: f32[4,6]",
     "declared f32[4,6] but the operands give pred[4,6]"),
    ("ROOT %r = f32[4,6] select(%x, %x, %x)", "x: f32[4,6]", "predicate type f32 is not allowed"),
    ("ROOT %r = f32[4,5] broadcast(%x), dimensions={1}", "x: f32[6]",
     "operand dimension 0 (size 6) maps to result dimension 1 (size 5)"),
    ("ROOT %r = f32[4,6] broadcast(%x), dimensions={}", "x: f32[6]", "must map each of the 1 operand"),
    ("ROOT %r = f32[5,5] reshape(%x)", "x: f32[4,6]", "cannot reshape f32[4,6] (24 elements) to [5, 5]"),
    ("ROOT %r = f32[6,4] transpose(%x), dimensions={0,0}", "x: f32[4,6]", "is not a permutation"),
    ("ROOT %r = f32[6,4] transpose(%x), dimensions={0,1}", "x: f32[4,6]",
     "declared f32[6,4] but the operands give f32[4,6]"),
    ("ROOT %r = f32[2,2] slice(%x), slice={[0:2], [4:8]}", "x: f32[4,6]",
     "slice [4:8:1] of dimension 1 is outside 0..6"),
    ("ROOT %r = f32[4,2] slice(%x), slice={[0:4:3], [0:6:3]}", "x: f32[4,6]",
     "declared f32[4,2] but the operands give f32[2,2]"),
    ("ROOT %r = f32[8,6] concatenate(%x, %y), dimensions={0}", "x: f32[4,6], y: f32[4,5]",
     "operand 1 f32[4,5] does not fit operand 0 f32[4,6] outside dimension 0"),
    ("%z = f32[] constant(0)\n  ROOT %r = f32[7,6] pad(%x, %z), padding=1_1x0_0", "x: f32[4,6]",
     "declared f32[7,6] but the operands give f32[6,6]"),
    ("%z = f32[] constant(0)\n  ROOT %r = f32[7,6] pad(%x, %z), padding=1_1", "x: f32[4,6]",
     "padding=1_1 gives 1 dimensions, the operand has 2"),
    ("%z = f32[] constant(0)\n  ROOT %r = f32[4] reduce(%x, %z), dimensions={0}, to_apply=%max", "x: f32[4,6]",
     "declared f32[4] but the operands give f32[6]"),
    ("%z = s32[] constant(0)\n  ROOT %r = f32[4] reduce(%x, %z), dimensions={1}, to_apply=%max", "x: f32[4,6]",
     "init value 0 s32[] must be a f32 scalar"),
    ("%z = f32[] constant(0)\n  ROOT %r = f32[4] reduce(%x, %z), dimensions={1}, to_apply=%max",
     "x: f32[4,6]", None),
    ("ROOT %r = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "x: f32[4,6]",
     "contracting dimension sizes differ: lhs [6] (dims [1]) vs rhs [4] (dims [0])"),
    ("ROOT %r = bf16[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={1}", "x: f32[4,6]",
     "dot result type bf16 is narrower"),
    ("ROOT %r = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={1}", "x: bf16[4,6]",
     None),
    ("ROOT %r = f32[2,4,4] dot(%x, %x), lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={2}, "
     "rhs_contracting_dims={2}", "x: f32[2,4,6]", "batch dimension sizes differ: lhs [2] (dims [0]) vs rhs [4]"),
    ("%t = (f32[4,6]) tuple(%x)\n  ROOT %r = f32[4,6] get-tuple-element(%t), index=1", "x: f32[4,6]",
     "index=1 is outside the 1 elements of (f32[4,6])"),
    ("ROOT %r = f32[4,6] iota(), iota_dimension=2", "x: f32[4,6]", "iota_dimension=2 is not a dimension"),
    ("ROOT %r = f32[4,6] sort(%x), dimensions={0}", "x: f32[4,6]", "missing to_apply=%computation"),
    ("ROOT %r = f32[4,6] frobnicate(%x)", "x: f32[4,6]", "unknown opcode 'frobnicate'"),
    ("ROOT %r = f32[4,6] clamp(%x, %x, %y)", "x: f32[4,6], y: f32[6]",
     "max bound f32[6] must be a f32 scalar or f32[4,6]"),
    # convolution
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
     "x: f32[1,4,4,3], k: f32[3,3,3,8]", None),
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
     "x: f32[1,4,4,4], k: f32[3,3,3,8]", "lhs has 4 input features; with feature_group_count=1 the kernel's input "
     "feature dimension must be 4, it is 3"),
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=3x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
     "x: f32[1,4,4,3], k: f32[3,3,3,8]", "window size 2 of spatial dimension 1 differs from the kernel's 3"),
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01io->b01f",
     "x: f32[1,4,4,3], k: f32[3,3,3,8]", "declared f32[1,4,4,8] but the operands give f32[1,2,2,8]"),
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01iq->bf01",
     "x: f32[1,4,4,3], k: f32[3,3,3,8]", "dim_labels rhs '01iq' must hold i, o"),
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=3}, dim_labels=b01f_01io->b01f",
     "x: f32[1,4,4,3], k: f32[3,3,3,8]", "window has 1 dimensions but the convolution's spatial dimensions has 2"),
    ("ROOT %r = f32[1,4,4,8] convolution(%x, %k), window={size=1x1}, dim_labels=b01f_01io->b01f, "
     "feature_group_count=2", "x: f32[1,4,4,4], k: f32[1,1,2,7]", "must divide by the group counts"),
    # reduce-window
    ("%z = f32[] constant(0)\n  ROOT %r = f32[2,3] reduce-window(%x, %z), window={size=2x2 stride=2x2}, "
     "to_apply=%max", "x: f32[4,6]", None),
    ("%z = f32[] constant(0)\n  ROOT %r = f32[2,3] reduce-window(%x, %z), window={size=2 stride=2}, "
     "to_apply=%max", "x: f32[4,6]", "window has 1 dimensions but the operand f32[4,6] has 2"),
    ("%z = f32[] constant(0)\n  ROOT %r = f32[2,3] reduce-window(%x, %z), window={size=2x2 stride=2x2}", "x: f32[4,6]",
     "missing to_apply=%computation"),
    # gather / scatter / dynamic slices
    ("ROOT %r = f32[3,6] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
     "index_vector_dim=1, slice_sizes={1,6}", "x: f32[4,6], i: s32[3]", None),
    ("ROOT %r = f32[3,6] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
     "index_vector_dim=1, slice_sizes={1,6}", "x: f32[4,6], i: f32[3]", "indices type f32 is not allowed"),
    ("ROOT %r = f32[3,6] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0,1}, "
     "index_vector_dim=1, slice_sizes={1,6}", "x: f32[4,6], i: s32[3]",
     "the index vector (dimension 1 of s32[3]) has 1 elements but start_index_map names 2 dimensions"),
    ("ROOT %r = f32[3,6] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
     "index_vector_dim=1, slice_sizes={2,6}", "x: f32[4,6], i: s32[3]", "dimension 0 is collapsed"),
    ("ROOT %r = f32[3,6] gather(%x, %i), offset_dims={0,1}, collapsed_slice_dims={0}, start_index_map={0}, "
     "index_vector_dim=1, slice_sizes={1,6}", "x: f32[4,6], i: s32[3]",
     "offset_dims has 2 entries but the slice keeps 1 operand dimensions"),
    ("ROOT %r = f32[4,6] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%max", "x: f32[4,6], i: s32[3], u: f32[3,6]",
     None),
    ("ROOT %r = f32[4,6] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%max", "x: f32[4,6], i: s32[2], u: f32[3,6]",
     "the scatter dims of the updates f32[3,6] are [3] but the indices' batch dims are [2]"),
    ("ROOT %r = f32[4,6] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%max", "x: f32[4,6], i: s32[3], u: f32[3,7]",
     "update window dimension 1 (size 7) exceeds operand dimension 1 (size 6)"),
    ("ROOT %r = f32[2,3] dynamic-slice(%x, %i, %i), dynamic_slice_sizes={2,3}", "x: f32[4,6], i: s32[]", None),
    ("ROOT %r = f32[2,3] dynamic-slice(%x, %i), dynamic_slice_sizes={2,3}", "x: f32[4,6], i: s32[]",
     "takes 2 scalar start indices (one per dimension), got 1"),
    ("ROOT %r = f32[2,3] dynamic-slice(%x, %i, %i), dynamic_slice_sizes={2,7}", "x: f32[4,6], i: s32[]",
     "dynamic_slice_sizes={2,7} must give a size within the operand"),
    ("ROOT %r = f32[4,6] dynamic-update-slice(%x, %u, %i, %i)", "x: f32[4,6], u: f32[2,2], i: s32[]", None),
    ("ROOT %r = f32[4,6] dynamic-update-slice(%x, %u, %i, %i)", "x: f32[4,6], u: f32[5,2], i: s32[]",
     "update f32[5,2] must have the operand's type and rank and fit in f32[4,6]"),
    ("ROOT %r = f32[4,6] dynamic-update-slice(%x, %u, %i, %j)", "x: f32[4,6], u: f32[2,2], i: s32[], j: s64[]",
     "start index 1 s64[] must be an integer scalar of the type of the first one"),
])
def test_shape_errors(body, params, message):
    module = _module(body, params)
    if message is None:
        verify_module(module)
        return
    with pytest.raises(VerificationError) as info:
        verify_module(module)
    text = str(info.value)
    assert text.startswith("computation %main: %r (") or text.startswith("computation %main: %t ("), text
    assert message in text, text


def _chain() -> tuple[Module, Computation, list[Instruction]]:
    module = _module("%n = f32[4,6] negate(%x)\n  ROOT %e = f32[4,6] exponential(%n)")
    comp = module.entry
    return module, comp, comp.instructions


def test_cycle_is_named():
    module, comp, (x, n, e) = _chain()
    n.operands = [e]
    with pytest.raises(VerificationError, match=r"%n \(negate\): cycle: %n -> %e -> %n"):
        verify_module(module)


def test_operand_from_another_computation():
    module, comp, (x, n, e) = _chain()
    n.operands = [module.computation("max").instructions[0]]
    with pytest.raises(VerificationError, match=r"%n \(negate\): operand 0 %a belongs to computation %max"):
        verify_module(module)


def test_duplicate_names_and_parameters():
    module, comp, (x, n, e) = _chain()
    n.name = "a"
    with pytest.raises(VerificationError, match=r"the name %a is also used in computation %max"):
        verify_module(module)
    module, comp, (x, n, e) = _chain()
    x.parameter_number = 1
    with pytest.raises(VerificationError, match=r"parameter numbers are \[1\], expected 0..0"):
        verify_module(module)


def test_root_must_belong():
    module, comp, (x, n, e) = _chain()
    comp.root = Instruction("ghost", "negate", x.shape, [x])
    with pytest.raises(VerificationError, match="computation %main: the ROOT is not an instruction"):
        verify_module(module)


def test_fusion_parameters_must_match():
    module = parse_module(_fixed(EVERY_OP))
    fu = next(i for i in module.entry.instructions if i.name == "fu")
    fu.operands = [fu.operands[0], fu.operands[0]]
    with pytest.raises(VerificationError, match=r"%fu \(fusion\): parameter\(1\) %p1 of %fused is f32\[6\] but "
                                                r"receives f32\[4,6\]"):
        verify_module(module)


def test_called_computation_must_be_in_module_and_not_recursive():
    module = parse_module(_fixed(EVERY_OP))
    fused = module.computation("fused")
    module.computations.remove(fused)
    with pytest.raises(VerificationError, match=r"%fu \(fusion\): calls computation %fused, which is not in"):
        verify_module(module)
    module = parse_module(_fixed(EVERY_OP))
    rd = next(i for i in module.entry.instructions if i.name == "rd")
    mx = module.computation("max")
    m = mx.root
    mx.instructions.insert(2, Instruction("again", "reduce", m.shape, [m.operands[0], m.operands[1]],
                                          {"dimensions": (), "to_apply": mx}))
    assert rd.attrs["to_apply"] is mx
    with pytest.raises(VerificationError, match=r"recursive call: %max -> %max"):
        verify_module(module)


def test_reducer_signature():
    module = _module("%z = f32[] constant(0)\n  ROOT %r = f32[4] reduce(%x, %z), dimensions={1}, to_apply=%max")
    for inst in module.computation("max").instructions:  # a consistent reducer of f32[2] values
        inst.shape = Shape.array("f32", (2,))
    with pytest.raises(VerificationError, match=r"%r \(reduce\): parameter\(0\) %a of %max is f32\[2\] but "
                                                r"receives f32\[\]"):
        verify_module(module)


def test_constant_literal_must_match():
    module = _module("ROOT %c = f32[2] constant({1, 2})")
    c = module.entry.root
    c.literal = np.array([1, 2], np.float64)
    with pytest.raises(VerificationError, match=r"%c \(constant\): the literal is float64\[2\] but the shape is "
                                                r"f32\[2\]"):
        verify_module(module)
    c.literal = None
    with pytest.raises(VerificationError, match="has no data"):
        verify_module(module)


def test_message_names_torch_origin():
    module = _module("ROOT %r = f32[4,7] negate(%x), metadata={op_name=\"aten.neg\" source_file=\"m.py\" "
                     "source_line=7}")
    with pytest.raises(VerificationError, match=r"%r \(negate\) from aten.neg at m.py:7: the shape is declared"):
        verify_module(module)


def test_infer_shape_directly():
    f = Shape.array("f32", (2, 3))
    assert infer_shape("add", [f, f], {}) == Shape.array("f32", (2, 3))
    assert infer_shape("dot", [Shape.array("bf16", (2, 3)), Shape.array("bf16", (3, 5))],
                       {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}) == Shape.array("bf16", (2, 5))
    assert infer_shape("convert", [f], {}, Shape.array("bf16", (2, 3))) == Shape.array("bf16", (2, 3))
    with pytest.raises(ShapeInferenceError, match="cannot be inferred"):
        infer_shape("reshape", [f], {})
    assert parse_padding("1_2x-1_0_3", 2) == [(1, 2, 0), (-1, 0, 3)]
    assert format_padding([(1, 2, 0), (-1, 0, 3)]) == "1_2x-1_0_3"
