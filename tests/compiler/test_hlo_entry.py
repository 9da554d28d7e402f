"""HLO text as the model: ``compiler.compile(text | path)`` runs end to end on the emulator and agrees with the
reference interpreter, on the ops the backend supports (dot, elementwise, broadcast, reshape, transpose,
convert); every dump of a compilation parses back to identical text and compiles again to the same results."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.errors import CompilationError, HloParseError, VerificationError
from hlo.interpreter import evaluate
from hlo.io import load_hlo_file, save_hlo_file
from hlo.ir import numpy_dtype
from hlo.parser import parse_module
from hlo.printer import print_module

LINEAR = """\
HloModule linear

ENTRY %main (x: f32[64,32], w: f32[48,32], b: f32[48]) -> f32[64,48] {
  %x = f32[64,32]{1,0} parameter(0)
  %w = f32[48,32]{1,0} parameter(1)
  %b = f32[48]{0} parameter(2)
  %wt = f32[32,48]{1,0} transpose(f32[48,32]{1,0} %w), dimensions={1,0}
  %d = f32[64,48]{1,0} dot(f32[64,32]{1,0} %x, f32[32,48]{1,0} %wt), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[64,48]{1,0} broadcast(f32[48]{0} %b), dimensions={1}
  %a = f32[64,48]{1,0} add(f32[64,48]{1,0} %d, f32[64,48]{1,0} %bb)
  %zero = f32[] constant(0)
  %z = f32[64,48]{1,0} broadcast(f32[] %zero), dimensions={}
  ROOT %relu = f32[64,48]{1,0} maximum(f32[64,48]{1,0} %a, f32[64,48]{1,0} %z)
}
"""

ELEMENTWISE = """\
HloModule elementwise

ENTRY %main (x: f32[8,16], y: f32[8,16]) -> (f32[8,16], f32[8,16], f32[8,16], f32[8,16]) {
  %x = f32[8,16]{1,0} parameter(0)
  %y = f32[8,16]{1,0} parameter(1)
  %e = f32[8,16]{1,0} exponential(f32[8,16]{1,0} %x)
  %l = f32[8,16]{1,0} log(f32[8,16]{1,0} %y)
  %t = f32[8,16]{1,0} tanh(f32[8,16]{1,0} %x)
  %s = f32[8,16]{1,0} logistic(f32[8,16]{1,0} %y)
  %q = f32[8,16]{1,0} sqrt(f32[8,16]{1,0} %y)
  %rq = f32[8,16]{1,0} rsqrt(f32[8,16]{1,0} %y)
  %n = f32[8,16]{1,0} negate(f32[8,16]{1,0} %t)
  %sub = f32[8,16]{1,0} subtract(f32[8,16]{1,0} %e, f32[8,16]{1,0} %l)
  %mul = f32[8,16]{1,0} multiply(f32[8,16]{1,0} %s, f32[8,16]{1,0} %q)
  %div = f32[8,16]{1,0} divide(f32[8,16]{1,0} %n, f32[8,16]{1,0} %y)
  %mn = f32[8,16]{1,0} minimum(f32[8,16]{1,0} %sub, f32[8,16]{1,0} %mul)
  %pw = f32[8,16]{1,0} power(f32[8,16]{1,0} %y, f32[8,16]{1,0} %t)
  ROOT %out = (f32[8,16]{1,0}, f32[8,16]{1,0}, f32[8,16]{1,0}, f32[8,16]{1,0}) tuple(%mn, %div, %rq, %pw)
}
"""

LAYOUT_AND_TYPES = """\
HloModule layout_and_types

ENTRY %main (x: f32[4,6,8], w: bf16[8,16]) -> (f32[24,16], bf16[16,24], f32[384]) {
  %x = f32[4,6,8]{2,1,0} parameter(0)
  %w = bf16[8,16]{1,0} parameter(1)
  %xr = f32[24,8]{1,0} reshape(f32[4,6,8]{2,1,0} %x)
  %xh = bf16[24,8]{1,0} convert(f32[24,8]{1,0} %xr)
  %d = f32[24,16]{1,0} dot(bf16[24,8]{1,0} %xh, bf16[8,16]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %dh = bf16[24,16]{1,0} convert(f32[24,16]{1,0} %d)
  %dt = bf16[16,24]{1,0} transpose(bf16[24,16]{1,0} %dh), dimensions={1,0}
  %flat = f32[384]{0} reshape(f32[24,16]{1,0} %d)
  ROOT %out = (f32[24,16]{1,0}, bf16[16,24]{1,0}, f32[384]{0}) tuple(%d, %dt, %flat)
}
"""

BATCHED = """\
HloModule batched

ENTRY %main (a: f32[2,16,32], b: f32[2,32,8]) -> f32[2,16,8] {
  %a = f32[2,16,32]{2,1,0} parameter(0)
  %b = f32[2,32,8]{2,1,0} parameter(1)
  %d = f32[2,16,8]{2,1,0} dot(f32[2,16,32]{2,1,0} %a, f32[2,32,8]{2,1,0} %b), \
lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %half = f32[] constant(0.5)
  %h = f32[2,16,8]{2,1,0} broadcast(f32[] %half), dimensions={}
  ROOT %scaled = f32[2,16,8]{2,1,0} multiply(f32[2,16,8]{2,1,0} %d, f32[2,16,8]{2,1,0} %h)
}
"""

CASES = {"linear": LINEAR, "elementwise": ELEMENTWISE, "layout_and_types": LAYOUT_AND_TYPES, "batched": BATCHED}


def inputs_for(text: str, seed: int = 0) -> list[np.ndarray]:
    """Random inputs of the entry parameters' types; positive ones (for log/sqrt/power) where named y."""
    rng = np.random.default_rng(seed)
    module = parse_module(text)
    args = []
    for p in module.entry.parameters:
        values = rng.standard_normal(p.shape.dims)
        values = np.abs(values) + 0.5 if p.name == "y" else values
        args.append(values.astype(numpy_dtype(p.shape.dtype)))
    return args


def check(exe: compiler.Executable, text: str, args: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-4):
    got = exe.run(*args)
    want = evaluate(parse_module(text), args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("opt_level", [0, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_text_matches_interpreter(case, opt_level):
    text = CASES[case]
    exe = compiler.compile(text, opt_level=opt_level)
    tol = 2e-2 if case == "layout_and_types" else 1e-4  # bf16 results: one rounding may differ
    check(exe, text, inputs_for(text), rtol=tol, atol=tol)
    final = parse_module(exe.hlo)  # the final HLO is itself valid input
    assert print_module(final) == exe.hlo


def test_auto_cast_matmult_stays_close():
    exe = compiler.compile(LINEAR, auto_cast="matmult")
    assert "bf16[" in exe.hlo
    check(exe, LINEAR, inputs_for(LINEAR), rtol=5e-2, atol=5e-2)


def test_hlo_file_with_constants_side_file(tmp_path):
    module = parse_module(LINEAR)
    # turn the weight into a large constant: it goes to the .npz side file
    w = next(p for p in module.entry.parameters if p.name == "w")
    args = inputs_for(LINEAR)
    w.opcode, w.parameter_number, w.literal = "constant", None, args[1]
    b = next(p for p in module.entry.parameters if p.name == "b")
    b.parameter_number = 1
    save_hlo_file(module, tmp_path / "linear.hlo", tmp_path / "linear.npz")
    assert 'neuronc_constants="linear.npz"' in (tmp_path / "linear.hlo").read_text()
    exe = compiler.compile(str(tmp_path / "linear.hlo"))
    want = evaluate(load_hlo_file(tmp_path / "linear.hlo"), [args[0], args[2]])
    np.testing.assert_allclose(exe.run(args[0], args[2])[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["linear", "layout_and_types"])
def test_every_dump_parses_back_identically_and_compiles(case, tmp_path):
    text = CASES[case]
    args = inputs_for(text)
    exe = compiler.compile(text, dump_dir=str(tmp_path), auto_cast="matmult", dump_pass_re=".*")
    dumps = sorted(tmp_path.glob("*.hlo"))
    assert len(dumps) >= 6  # before_optimizations + every pass, changed or not
    expected = exe.run(*args)
    for path in dumps:
        module = load_hlo_file(path)
        assert print_module(module) == path.read_text(), path.name
        again = compiler.compile(str(path), auto_cast="matmult")
        for g, w in zip(again.run(*args), expected, strict=True):
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=2e-2, atol=2e-2)


def test_errors_name_the_place():
    with pytest.raises(HloParseError, match=r"^4:30: syntax error: unexpected .%x.; expected one of"):
        compiler.compile("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0)\n  ROOT %y = f32[2] negate(%x %x)\n}\n")
    with pytest.raises(VerificationError, match=r"%y \(negate\): the shape is declared f32\[3\]"):
        compiler.compile("HloModule m\nENTRY %e {\n  %x = f32[2] parameter(0)\n  ROOT %y = f32[3] negate(%x)\n}\n")
    with pytest.raises(CompilationError, match=r"%t \(reverse\): reverse over 300 slices \(more than 256\) is not "
                                               "supported by the backend"):
        compiler.compile("HloModule m\nENTRY %e {\n  %x = f32[300] parameter(0)\n"
                         "  ROOT %t = f32[300] reverse(%x), dimensions={0}\n}\n")


def test_a_second_compile_of_an_hlo_file_is_found_by_its_source_and_its_side_file(tmp_path):
    """The lookup by source skips parsing; an edit of the text or of the constants side file is a miss."""
    module = parse_module(LINEAR)
    w = next(p for p in module.entry.parameters if p.name == "w")
    args = inputs_for(LINEAR)
    w.opcode, w.parameter_number, w.literal = "constant", None, args[1]
    next(p for p in module.entry.parameters if p.name == "b").parameter_number = 1
    path = tmp_path / "linear.hlo"
    save_hlo_file(module, path, tmp_path / "linear.npz")
    first = compiler.compile(str(path))
    second = compiler.compile(str(path))
    assert first.compile_stats.cache.startswith("miss") and "by source" in second.compile_stats.cache
    np.testing.assert_array_equal(second.run(args[0], args[2])[0], first.run(args[0], args[2])[0])
    w.literal = args[1] * 2.0  # same text, other weights in the side file
    save_hlo_file(module, path, tmp_path / "linear.npz")
    changed = compiler.compile(str(path))
    assert changed.compile_stats.cache.startswith("miss")
    want = evaluate(load_hlo_file(path), [args[0], args[2]])
    np.testing.assert_allclose(changed.run(args[0], args[2])[0], want[0], rtol=1e-4, atol=1e-4)
    text = compiler.compile(LINEAR), compiler.compile(LINEAR)  # HLO text given as a string
    assert "by source" in text[1].compile_stats.cache and text[1].asm == text[0].asm
