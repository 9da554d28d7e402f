"""HLO text: printer/parser round trip, XLA variants, parse errors, and the .hlo + .npz files."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from compiler.errors import HloParseError
from hlo.io import load_hlo_file, save_hlo_file
from hlo.ir import Computation, Instruction, Module, Quoted, Shape, SliceSpec, Window, numpy_dtype
from hlo.parser import parse_module
from hlo.printer import format_literal, format_shape, print_module

DATA = Path(__file__).parent / "data"

TUPLE_MODULE = """\
HloModule tuples, neuronc_note="a \\"quoted\\" note", entry_computation_layout={(f32[4,6]{1,0}, \
bf16[6,4]{0,1})->(f32[4]{0}, pred[4,6]{1,0}, s32[2,2]{1,0})}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[4,6], y: bf16[6,4]) -> (f32[4], pred[4,6], s32[2,2]) {
  %x = f32[4,6]{1,0} parameter(0)
  %y = bf16[6,4]{0,1} parameter(1)
  %zero = f32[] constant(0)
  %half = f32[] constant(0.5)
  %ints = s32[2,2]{1,0} constant({ {1, -2}, {3, 4} })
  %mask = pred[3]{0} constant({true, false, true})
  %small = bf16[2]{0} constant({0.1, -inf})
  %r = f32[4]{0} reduce(f32[4,6]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%add
  %cmp = pred[4,6]{1,0} compare(f32[4,6]{1,0} %x, f32[4,6]{1,0} %x), direction=GT
  %sl = f32[2,3]{1,0} slice(f32[4,6]{1,0} %x), slice={[0:2], [0:6:2]}
  %g = f32[4,6]{1,0} custom-call(f32[4,6]{1,0} %x), custom_call_target="gelu", metadata={op_name="aten.gelu"}
  %t = (f32[4]{0}, pred[4,6]{1,0}) tuple(f32[4]{0} %r, pred[4,6]{1,0} %cmp)
  %e = f32[4]{0} get-tuple-element((f32[4]{0}, pred[4,6]{1,0}) %t), index=0
  ROOT %out = (f32[4]{0}, pred[4,6]{1,0}, s32[2,2]{1,0}) tuple(f32[4]{0} %e, pred[4,6]{1,0} %cmp, \
s32[2,2]{1,0} %ints)
}
"""


def structure(module: Module) -> list:
    """Everything a module holds, as plain comparable data."""

    def attr(v):
        return ("comp", v.name) if isinstance(v, Computation) else v

    out: list = [module.name, dict(module.attrs), module.entry.name]
    for comp in module.computations:
        out.append((comp.name, comp.root.name))
        for i in comp.instructions:
            lit = None if i.literal is None else (str(i.literal.dtype), i.literal.tolist())
            out.append((i.name, i.opcode, i.shape, [o.name for o in i.operands],
                        {k: attr(v) for k, v in i.attrs.items()}, lit, i.parameter_number, i.metadata))
    return out


@pytest.mark.parametrize("text", [(DATA / "mlp_fusion.hlo").read_text(), TUPLE_MODULE],
                         ids=["fusion", "tuples"])
def test_round_trip_is_exact(text):
    module = parse_module(text)
    printed = print_module(module)
    assert printed == text
    assert structure(parse_module(printed)) == structure(module)


def test_parsed_structure():
    m = parse_module(TUPLE_MODULE)
    add, main = m.computations
    assert m.entry is main and m.attrs == {"neuronc_note": Quoted('a "quoted" note')}
    inst = {i.name: i for i in main.instructions}
    assert inst["y"].shape.layout == (0, 1) and inst["x"].shape.layout is None
    assert inst["r"].attrs == {"dimensions": (1,), "to_apply": add}
    assert inst["sl"].attrs["slice"] == SliceSpec(((0, 2, 1), (0, 6, 2)))
    assert inst["cmp"].attrs["direction"] == "GT"
    assert inst["g"].attrs["custom_call_target"] == Quoted("gelu")
    assert inst["g"].metadata == {"op_name": "aten.gelu"}
    assert inst["e"].attrs["index"] == 0
    assert inst["ints"].literal.dtype == np.int32 and inst["ints"].literal.tolist() == [[1, -2], [3, 4]]
    assert inst["mask"].literal.tolist() == [True, False, True]
    assert inst["small"].literal.dtype == ml_dtypes.bfloat16
    assert inst["zero"].literal.shape == () and inst["half"].literal == 0.5
    assert main.root is inst["out"] and main.root.shape.is_tuple


def _programmatic_module() -> Module:
    x = Instruction("x", "parameter", Shape.array("bf16", (2, 3)), parameter_number=0)
    big = np.linspace(-3, 3, 18, dtype=np.float32).reshape(3, 6).astype(ml_dtypes.bfloat16)
    w = Instruction("w", "constant", Shape.array("bf16", (3, 6)), literal=big, attrs={"data": Quoted("fc.w")})
    # no data attribute: the printer keys it by name
    b = Instruction("b", "constant", Shape.array("f32", (17,)), literal=np.arange(17, dtype=np.float32) / 3)
    dot = Instruction("dot", "dot", Shape.array("f32", (2, 6)), [x, w],
                      {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)},
                      metadata={"op_name": "aten.mm", "source_file": "m.py", "source_line": 3})
    comp = Computation("main", [x, w, b, dot])
    module = Module("prog", [comp])
    module.attrs["flag"] = True
    return module


def test_io_round_trip_with_side_file(tmp_path):
    module = _programmatic_module()
    (tmp_path / "c").mkdir()
    save_hlo_file(module, tmp_path / "m.hlo", tmp_path / "c" / "m.npz")
    text = (tmp_path / "m.hlo").read_text()
    assert text.startswith('HloModule prog, flag=true, neuronc_constants="c/m.npz", entry_computation_layout=')
    assert 'constant({...}), data="fc.w"' in text and 'constant({...}), data="b"' in text
    loaded = load_hlo_file(tmp_path / "m.hlo")
    assert print_module(loaded) == text
    w = loaded.computations[0].instructions[1]
    assert w.literal.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(w.literal, module.computations[0].instructions[1].literal)
    module.computations[0].instructions[2].attrs["data"] = Quoted("b")  # the key the printer gave it
    assert structure(loaded)[3:] == structure(module)[3:]
    with np.load(tmp_path / "c" / "m.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == ["b", "fc.w"]


def test_missing_side_file_and_missing_key(tmp_path):
    module = _programmatic_module()
    save_hlo_file(module, tmp_path / "m.hlo", tmp_path / "m.npz")
    (tmp_path / "m.npz").unlink()
    with pytest.raises(HloParseError, match=r"constants file .*m\.npz.* does not exist"):
        load_hlo_file(tmp_path / "m.hlo")
    text = print_module(module)
    with pytest.raises(HloParseError, match=r'5:3: constant %w: no data "fc.w"'):
        parse_module(text, constants={})
    lazy = parse_module(text)  # constants=None: literals stay unresolved
    assert lazy.computations[0].instructions[1].literal is None


def test_literal_formats():
    assert format_literal(np.array(0, np.float32)) == "0"
    assert format_literal(np.array([[1, 2], [3, 4]], np.int32)) == "{ {1, 2}, {3, 4} }"
    assert format_literal(np.array([np.nan, np.inf, 1e-8], np.float32)) == "{nan, inf, 1e-08}"
    assert format_literal(np.zeros((2, 0), np.float32)) == "{ {}, {} }"
    values = np.random.default_rng(1).standard_normal(16).astype(np.float32) * 1e-3
    back = parse_module(f"HloModule m\nENTRY %e {{\n  ROOT %c = f32[16]{{0}} constant({format_literal(values)})\n}}\n")
    np.testing.assert_array_equal(back.entry.root.literal, values)


XLA_VARIANT = """\
HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0}, /*index=1*/f32[3]{0})->f32[2,3]{1,0}}

ENTRY main.7 {
  Arg_0.1 = f32[2,3] parameter(0)
  Arg_1.2 = f32[3]{0} parameter(1), sharding={replicated}
  broadcast.3 = f32[2,3]{1,0} broadcast(Arg_1.2), dimensions={1}
  conv = f32[2,3] custom-call(Arg_0.1, /*index=1*/broadcast.3), custom_call_target="foo", \
window={size=1x1 stride=1x1}, dim_labels=b01f_01io->b01f, backend_config={"a": {"b": [1, 2]}}
  ROOT fusion = f32[2,3]{1,0} fusion(conv), kind=kLoop, calls=fused, metadata={op_type="Mul" op_name="jit(f)/mul" \
source_file="/x.py" source_line=4}
}

fused {
  p = f32[2,3] parameter(0)
  ROOT n = f32[2,3] negate(p)
}
"""


def test_xla_variants_parse():
    m = parse_module(XLA_VARIANT)
    assert m.entry.name == "main.7" and m.computations[-1] is m.entry  # ENTRY moves last
    inst = {i.name: i for i in m.entry.instructions}
    assert inst["conv"].operands == [inst["Arg_0.1"], inst["broadcast.3"]]
    assert inst["conv"].attrs["window"] == Window.make((1, 1))
    assert inst["conv"].attrs["dim_labels"] == "b01f_01io->b01f"
    assert inst["conv"].attrs["backend_config"] == '{"a": {"b": [1, 2]}}'
    assert inst["fusion"].attrs["calls"] is m.computation("fused")
    assert inst["fusion"].metadata["source_line"] == 4 and inst["fusion"].metadata["op_type"] == "Mul"
    assert m.attrs == {"is_scheduled": True}
    text = print_module(m)
    assert "window={size=1x1}" in text and 'backend_config={"a": {"b": [1, 2]}}' in text
    assert print_module(parse_module(text)) == text


@pytest.mark.parametrize("text, where, words", [
    ("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0\n}\n", "4:1", ["'}'", "')'"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0)\n  %y = f32[2] add(%x %x)\n}\n", "4:22",
     ["'%x'", "','", "')'"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2 parameter(0)\n}\n", "3:14", ["'parameter'", "']'"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2]{0} parameter(0)\n", "3:29", ["the text ends too early", "'}'"]),
    ("HloModule m\nENTRY %e {\n  %x = f33[2] parameter(0)\n}\n", "3:8", ["unknown element type 'f33'"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0)\n  ROOT %y = f32[2] add(%x, %z)\n}\n", "4:28",
     ["undefined operand %z"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0)\n  %x = f32[2] negate(%x)\n}\n", "4:3",
     ["duplicate instruction name %x", "line 3"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[] parameter(0)\n  ROOT %r = f32[] reduce(%x, %x), to_apply=%nope\n}\n",
     "4:44", ["unknown computation %nope"]),
    ("HloModule m\n%c {\n  ROOT %a = f32[] parameter(0)\n}\nENTRY %e {\n  ROOT %b = f32[] negate(%a)\n}\n",
     "6:26", ["undefined operand %a", "belongs to computation %c"]),
    ("HloModule m\nENTRY %e {\n  ROOT %b = f32[] negate(%a)\n}\n%c {\n  ROOT %a = f32[] parameter(0)\n}\n",
     "3:26", ["undefined operand %a", "belongs to computation %c"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0)\n  ROOT %y = f32[3] negate(f32[3] %x)\n}\n", "4:34",
     ["%x is written with shape f32[3]", "defined as f32[2]"]),
    ("HloModule m\nENTRY %e {\n  ROOT %c = s32[2] constant({1, 2, 3})\n}\n", "3:8",
     ["dims [3]", "declares [2]"]),
    ("HloModule m\nENTRY %e {\n  ROOT %c = f32[2]{0,1} parameter(0)\n}\n", "3:19", ["not a permutation"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0) ^\n}\n", "3:28", ["unexpected '^'"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[1,4] parameter(0)\n  ROOT %r = f32[1,2] reduce-window(%x, %x), "
     "window={size=1x2 stride=2}\n}\n", "4:62", ["window field stride has 1 dimensions but size has 2"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[1,4] parameter(0)\n  ROOT %r = f32[1,2] reduce-window(%x, %x), "
     "window={size=1x2 pad=1x1}\n}\n", "4:62", ["window field pad: '1' is not a valid value"]),
    ("HloModule m\nENTRY %e {\n  %x = f32[1,4] parameter(0)\n  ROOT %r = f32[1,2] reduce-window(%x, %x), "
     "window={size=1x2 strides=2x2}\n}\n", "4:62", ["malformed window field 'strides=2x2'"]),
], ids=["eof-in-parens", "missing-comma", "missing-bracket", "eof", "dtype", "undefined", "duplicate",
        "unknown-computation", "other-computation", "later-computation", "operand-shape", "literal-dims",
        "layout", "bad-char", "window-rank", "window-pad", "window-field"])
def test_parse_errors_name_position_and_token(text, where, words):
    with pytest.raises(HloParseError) as info:
        parse_module(text, source="t.hlo")
    message = str(info.value)
    if where is not None:
        assert message.startswith(f"t.hlo:{where}: "), message
    for word in words:
        assert word in message, message


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["f32", "bf16", "f16", "f64", "f8e4m3fn", "s8", "s32", "u8", "pred"]))
def test_inline_literals_round_trip_bit_exactly(data, dtype):
    np_dtype = numpy_dtype(dtype)
    dims = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    storage = np.dtype(f"u{np_dtype.itemsize}") if np_dtype.kind == "V" else np_dtype
    array = data.draw(hnp.arrays(storage, dims)).view(np_dtype)
    shape = Shape.array(dtype, dims)
    text = f"HloModule m\nENTRY %e {{\n  ROOT %c = {format_shape(shape)} constant({format_literal(array)})\n}}\n"
    back = parse_module(text).entry.root.literal
    assert back.dtype == np_dtype and back.shape == array.shape
    same = back.view(storage) == array.view(storage)
    if np_dtype.kind in "fV":  # any NaN reads back as a NaN, not necessarily with the same payload
        same |= np.isnan(back.astype(np.float64)) & np.isnan(array.astype(np.float64))
    assert same.all()
