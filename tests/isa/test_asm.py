"""The ISA text form: printer/assembler round trips, assembler errors, the constants side file.

``programs()`` and ``assert_same_program`` are shared with test_neff.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.asm import (
    load_asm_file,
    parse_program,
    print_instruction,
    print_program,
    read_constants,
    save_asm_file,
)
from isa.dtypes import DTYPES
from isa.errors import AsmError, ProgramError
from isa.instructions import OPCODES
from isa.program import TENSOR_KINDS, AccessPattern, Instruction, Program

EXAMPLE = """\
; neuronc ISA program
.target trn1
.tensor in0 input f32 [3,100]
.tensor w0 const bf16 [100,300]
.tensor out0 output f32 [3,300]
.meta useful_macs 90000
.meta peak_sbuf_bytes 4096
sp.dma dst=sbuf[0:100]@0[1,3]:f32 src=hbm:in0@0[1,100][100,3]:f32 queue=0 signal(s5)
pe.load_stationary src=sbuf[0:100]@4096[1,128]:bf16 wait(s5>=1)
pe.multiply_moving dst=psum[0:128]@0[1,3]:f32 src=sbuf[0:100]@0[1,3]:bf16 acc=0 signal(s0)
act.activation dst=sbuf[0:128]@8192[1,3]:f32 src=psum[0:128]@0[1,3]:f32 \
bias=sbuf[0:128]@12288[1,1]:f32 func=relu scale=1.0 wait(s0>=1) signal(s1)  ; optional comment
"""

# ------------------------------------------------------------------------------------ shared helpers

_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,7}", fullmatch=True)
_KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,9}", fullmatch=True)
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_U32 = st.integers(0, 2**32 - 1)
_FLOATS = st.floats(allow_nan=False)


@st.composite
def access_patterns(draw, memories: tuple[str, ...], tensors: list[str]) -> AccessPattern:
    memory = draw(st.sampled_from([m for m in memories if m != "hbm" or tensors]))
    dtype = draw(st.sampled_from(list(DTYPES)))
    offset = draw(st.integers(0, 2**40))
    pairs = tuple(draw(st.lists(st.tuples(st.integers(-(2**31), 2**31), st.integers(1, 2**20)), max_size=4)))
    if memory == "hbm":
        return AccessPattern("hbm", dtype, offset, pairs, partitions=draw(st.integers(1, 2**20)),
                             tensor=draw(st.sampled_from(tensors)),
                             partition_stride=draw(st.integers(0, 2**40)))
    start = draw(st.integers(0, 127))
    return AccessPattern(memory, dtype, offset, pairs, start_partition=start,
                         partitions=draw(st.integers(1, 128 - start)))


@st.composite
def instructions(draw, tensors: list[str]) -> Instruction:
    spec = draw(st.sampled_from(list(OPCODES.values())))
    instr = Instruction(draw(st.sampled_from(spec.engines)), spec.name,
                        comment=draw(_TEXT).strip())
    for operand in spec.operands:
        if not operand.optional or draw(st.booleans()):
            instr.operands[operand.name] = draw(access_patterns(operand.memories, tensors))
    for attr in spec.attrs:
        if attr.kind is not str:
            values = _INT64 if attr.kind is int else _FLOATS
        else:
            values = st.sampled_from(attr.choices) if attr.choices else _TEXT
        instr.attrs[attr.name] = draw(values)
    instr.waits = draw(st.lists(st.tuples(_U32, _U32), max_size=3))
    instr.signals = draw(st.lists(_U32, max_size=3))
    return instr


@st.composite
def programs(draw, with_constants: bool = False) -> Program:
    """Random valid programs (every attribute given, so that printing adds nothing)."""
    program = Program(draw(st.sampled_from(["trn1", "trn2", "targets/my target.json"])))
    for name in draw(st.lists(_NAMES, unique=True, max_size=6)):
        kind = draw(st.sampled_from(TENSOR_KINDS))
        dtype = draw(st.sampled_from(list(DTYPES)))
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        program.add_tensor(name, kind, dtype, shape)
        if kind == "const" and with_constants:
            np_dtype = DTYPES[dtype].numpy
            raw = draw(st.binary(min_size=math.prod(shape) * np_dtype.itemsize,
                                 max_size=math.prod(shape) * np_dtype.itemsize))
            program.constants[name] = np.frombuffer(raw, np_dtype).reshape(shape).copy()
    program.inputs = draw(st.permutations(program.inputs))
    program.outputs = draw(st.permutations(program.outputs))
    program.meta = draw(st.dictionaries(_KEYS, st.one_of(_INT64, _FLOATS, _TEXT), max_size=3))
    program.instructions = draw(st.lists(instructions(list(program.tensors)), max_size=12))
    return program


def assert_same_program(a: Program, b: Program) -> None:
    """Equal as dataclasses, ignoring Instruction.line; constants compared bit for bit."""
    assert a.constants.keys() == b.constants.keys()
    for name, array in a.constants.items():
        other = b.constants[name]
        assert (array.dtype, array.shape) == (other.dtype, other.shape), name
        assert array.tobytes() == other.tobytes(), name

    def strip(p: Program) -> Program:
        return replace(p, constants={}, instructions=[replace(i, line=None) for i in p.instructions])

    assert strip(a) == strip(b)


def every_opcode_program() -> Program:
    """Every opcode on every engine that may run it, every optional operand, every dtype."""
    program = Program("trn1")
    program.add_tensor("in0", "input", "f32", (4, 8))
    program.add_tensor("w.0", "const", "bf16", (8, 8))
    program.add_tensor("out0", "output", "fp8e4", (4, 8))
    dtypes = list(DTYPES)
    n = 0
    for spec in OPCODES.values():
        for engine in spec.engines:
            instr = Instruction(engine, spec.name, waits=[(n, 1)], signals=[n + 1], comment=f"op {n}")
            for operand in spec.operands:
                memory = operand.memories[n % len(operand.memories)]
                dtype = dtypes[n % len(dtypes)]
                n += 1
                instr.operands[operand.name] = (
                    AccessPattern("hbm", dtype, 16, ((1, 8),), partitions=4, tensor="in0",
                                  partition_stride=8) if memory == "hbm" else
                    AccessPattern(memory, dtype, 64 * n, ((8, 2), (1, 4)), start_partition=32,
                                  partitions=32))
            for attr in spec.attrs:
                instr.attrs[attr.name] = attr.choices[-1] if attr.choices else attr.kind(n % 3 - 1)
            program.instructions.append(instr)
            n += 1
    program.meta = {"useful_macs": 90000, "ratio": 0.25, "note": 'a "quoted" note'}
    return program


# ------------------------------------------------------------------------------------------- tests

def test_example_round_trips_exactly() -> None:
    program = parse_program(EXAMPLE)
    assert print_program(program) == EXAMPLE
    act = program.instructions[3]
    assert (act.engine, act.opcode, act.line, act.comment) == ("act", "activation", 11, "optional comment")
    assert act.operands["bias"] == AccessPattern("sbuf", "f32", 12288, ((1, 1),), 0, 128)
    dma_src = program.instructions[0].operands["src"]
    assert dma_src == AccessPattern("hbm", "f32", 0, ((100, 3),), partitions=100, tensor="in0",
                                    partition_stride=1)
    assert program.inputs == ["in0"] and program.outputs == ["out0"]
    assert program.meta == {"useful_macs": 90000, "peak_sbuf_bytes": 4096}


def test_every_opcode_and_dtype_round_trips() -> None:
    program = every_opcode_program()
    text = print_program(program)
    assert {f"{i.engine}.{i.opcode}" for i in program.instructions} == {
        f"{e}.{s.name}" for s in OPCODES.values() for e in s.engines}
    assert all(f":{d} " in text or f":{d}\n" in text for d in DTYPES)
    parsed = parse_program(text)
    assert_same_program(parsed, program)
    assert [i.line for i in parsed.instructions] == list(range(9, 9 + len(program.instructions)))
    assert print_program(parsed) == text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_round_trip(program: Program) -> None:
    text = print_program(program)
    parsed = parse_program(text)
    assert_same_program(parsed, program)
    assert print_program(parsed) == text


def test_defaults_are_filled_and_printed() -> None:
    program = parse_program(".target trn1\nact.activation src=sbuf[0:1]@0:f32 dst=sbuf[0:1]@4:f32\n")
    assert program.instructions[0].attrs == {"func": "identity", "scale": 1.0, "acc_cmd": "idle"}
    assert print_program(program).splitlines()[-1] == (
        "act.activation dst=sbuf[0:1]@4:f32 src=sbuf[0:1]@0:f32 func=identity scale=1.0")


def test_optional_attributes_are_printed_only_off_their_default() -> None:
    """Attributes added to an opcode later (``optional``) leave older programs' text unchanged."""
    src = AccessPattern("sbuf", "f32", 0, ((1, 4),), 0, 8)
    plain = Instruction("dve", "tensor_scalar", {"dst": src, "src": src}, {"op": "add", "scalar": 1.0})
    assert print_instruction(plain) == ("dve.tensor_scalar dst=sbuf[0:8]@0[1,4]:f32 src=sbuf[0:8]@0[1,4]:f32 "
                                        "op=add scalar=1.0")
    for attrs, shown in (({"op1": "none", "scalar1": 0.0}, ""), ({"scalar1": -0.0}, " scalar1=-0.0"),
                         ({"op1": "max", "scalar1": 2.0}, " op1=max scalar1=2.0")):
        instr = replace(plain, attrs={**plain.attrs, **attrs})
        text = print_instruction(instr)
        assert text == print_instruction(plain) + shown
        parsed = parse_program(f".target trn1\n{text}\n").instructions[0]
        assert print_instruction(parsed) == text
        assert math.copysign(1, parsed.attrs["scalar1"]) == math.copysign(1, attrs.get("scalar1", 0.0))


def test_special_floats_and_strings() -> None:
    text = (".target trn1\n.meta a inf\n.meta b -inf\n.meta c \"x\\ny\"\n.meta d 1e+20\n"
            "dve.memset dst=sbuf[0:1]@0:f32 value=nan\npool.memset dst=sbuf[0:1]@0:f32 value=-inf\n")
    program = parse_program(text)
    assert program.meta["a"] == math.inf and program.meta["b"] == -math.inf
    assert program.meta["c"] == "x\ny" and program.meta["d"] == 1e20
    assert math.isnan(program.instructions[0].attrs["value"])
    assert program.instructions[1].attrs["value"] == -math.inf
    assert print_program(parse_program(print_program(program))) == print_program(program)


def test_input_order_differing_from_declarations() -> None:
    program = Program("trn1")
    program.add_tensor("a", "input", "f32", (1,))
    program.add_tensor("b", "input", "f32", (1,))
    program.inputs = ["b", "a"]
    text = print_program(program)
    assert ".inputs b a\n" in text
    assert parse_program(text).inputs == ["b", "a"]


def test_print_instruction_and_printer_errors() -> None:
    assert print_instruction(Instruction("pe", "nop", waits=[(3, 2)], signals=[1, 2])) == (
        "pe.nop wait(s3>=2) signal(s1,s2)")
    bad = [
        (Instruction("pe", "fly"), "unknown opcode 'fly'"),
        (Instruction("pe", "nop", attrs={"x": 1}), "pe.nop has no operand or attribute 'x'"),
        (Instruction("dve", "tensor_reduce", operands={"dst": AccessPattern("sbuf", "f32", 0, ()),
                                                       "src": AccessPattern("sbuf", "f32", 0, ())}),
         "missing attribute 'op'"),
        (Instruction("sp", "dma", attrs={"queue": 1.5}), "queue=1.5 is not int"),
        (Instruction("pe", "nop", comment="two\nlines"), "spans several lines"),
        (Instruction("pe", "load_stationary", operands={"src": AccessPattern("hbm", "f32", 0, ())}),
         "needs a tensor"),
    ]
    for instr, message in bad:
        with pytest.raises(ProgramError, match=message):
            print_instruction(instr)


_HEAD = ".target trn1\n.tensor x input f32 [4,4]\n"
ASM_ERRORS = [
    # (text after _HEAD, the offending token on the last line ("" = end of line), message)
    ("tpu.nop", "tpu", "unknown engine 'tpu'; engines: pe, act, dve, pool, sp"),
    ("pe.leap", "leap", "unknown opcode 'leap'"),
    ("pe.dma dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32", "dma",
     "opcode 'dma' is not allowed on engine 'pe' (allowed: sp)"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32 speed=3", "speed",
     "sp.dma has no operand or attribute 'speed' (operands: dst, src; attributes: queue)"),
    ("sp.dma dst=sbuf[0:1]@0:f32", "dma", "sp.dma: missing operand 'src'"),
    ("dve.tensor_reduce dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32", "tensor_reduce",
     "dve.tensor_reduce: missing attribute 'op'"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32 queue=one", "one",
     "sp.dma: attribute 'queue' expects int, got 'one'"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32 queue=2.0", "2.0",
     "sp.dma: attribute 'queue' expects int, got '2.0'"),
    ("dve.memset dst=sbuf[0:1]@0:f32 value=zero", "zero", "dve.memset: attribute 'value' expects float"),
    ("dve.tensor_reduce dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32 op=mean", "mean",
     "dve.tensor_reduce: op='mean' is not one of add, max, min"),
    ("dve.memset value=psum[0:1]@0:f32 dst=sbuf[0:1]@0:f32", "psum",
     "dve.memset: attribute 'value' expects float, got an access pattern"),
    ("dve.memset dst=3", "3", "dve.memset: operand 'dst' expects an access pattern, got '3'"),
    ("pe.load_stationary src=psum[0:1]@0:f32", "psum",
     "pe.load_stationary: operand 'src' cannot be in psum (allowed: sbuf)"),
    ("dve.memset dst=dram[0:1]@0:f32", "dram", "unknown memory 'dram'; memories: sbuf, psum, hbm"),
    ("dve.memset dst=sbuf[0:1]@0:f64", "f64", "unknown dtype 'f64'"),
    (".tensor y input f64 [1]", "f64", "unknown dtype 'f64'"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=hbm:y@0[1,1]:f32", "y", "hbm tensor 'y' is not declared"),
    ("dve.memset dst=sbuf[5:4]@0:f32", "4]", "malformed pattern: empty partition range [5:4]"),
    ("dve.memset dst=sbuf[0:1]@0[1,0]:f32", "0]", "malformed pattern: count must be >= 1, got 0"),
    ("dve.memset dst=sbuf[0:1]@1.5:f32", "1.5", "malformed pattern: offset must be an integer"),
    ("dve.memset dst=sbuf[0:1]@0[1,1][1,1][1,1][1,1][1,1]:f32", "1,1]:",
     "malformed pattern: more than 4 free [stride,count] pairs"),
    ("sp.dma dst=sbuf[0:1]@0:bf16 src=hbm:x@0:f32", "f32", "malformed pattern: hbm needs a [partition"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=hbm[0:1]@0:f32", "hbm", "malformed pattern: hbm is written"),
    ("sp.dma dst=sbuf:x@0[1,1]:f32 src=hbm:x@0[1,1]:f32", "sbuf", "malformed pattern: sbuf is written"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=sbuf[0:1", "", "syntax error at end of line; expected ']'"),
    (".tensor x output f32 [1]", "x", "duplicate tensor 'x' (first declared on line 2)"),
    (".tensor z weights f32 [1]", "weights", "unknown tensor kind 'weights'"),
    (".bogus 1", ".bogus", "syntax error at '.bogus'; expected '.constants' or"),
    ("pe.nop wait(t1>=1)", "t1", "semaphore must be sN (N a number), got 't1'"),
    ("pe.nop acc=1", "acc", "pe.nop has no operand or attribute 'acc'"),
    ("sp.dma dst=sbuf[0:1]@0:f32 src=sbuf[0:1]@0:f32 queue=1 queue=2", "queue=2", "duplicate 'queue'"),
    (".meta k v", "v", "meta value must be a number or a quoted string, got 'v'"),
    (".target trn2", "trn2", "duplicate .target directive"),
    (".inputs x x", ".inputs", ".inputs must list each input tensor once: x"),
    (".outputs x", "x", ".outputs names 'x', which is not a declared output tensor"),
    ("pe.nop ; fine\nsp.nop $", "$", "syntax error at '$'"),
]


@pytest.mark.parametrize(("body", "token", "message"), ASM_ERRORS, ids=[m[:40] for _, _, m in ASM_ERRORS])
def test_asm_errors(body: str, token: str, message: str) -> None:
    last = body.split("\n")[-1]
    line, column = 3 + body.count("\n"), last.index(token) + 1 if token else len(last) + 1
    with pytest.raises(AsmError) as info:
        parse_program(_HEAD + body + "\n", source="prog.s")
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert str(info.value).startswith(f"prog.s:{line}:{column}: {message}"), str(info.value)


def test_missing_target() -> None:
    with pytest.raises(AsmError, match="^missing .target directive$"):
        parse_program("pe.nop\n")


def constants_program() -> Program:
    program = Program("trn1")
    program.add_tensor("x", "input", "bf16", (2, 3))
    program.add_tensor("w.0", "const", "bf16", (2, 3))
    program.add_tensor("s", "const", "fp8e5", (4,))
    program.add_tensor("i", "const", "i32", ())
    program.constants = {
        "w.0": np.array([[1.5, -2.0, 3.25], [np.inf, 1e-3, -0.0]], dtype=ml_dtypes.bfloat16),
        "s": np.array([1, 2, -4, 57344], dtype=ml_dtypes.float8_e5m2),
        "i": np.array(7, dtype=np.int32),
    }
    program.instructions.append(Instruction("sp", "dma", {
        "dst": AccessPattern("sbuf", "bf16", 0, ((1, 3),), partitions=2),
        "src": AccessPattern("hbm", "bf16", 0, ((1, 3),), partitions=2, tensor="w.0", partition_stride=3),
    }, {"queue": 0}, signals=[0]))
    return program


def test_constants_side_file_round_trip(tmp_path) -> None:
    program = constants_program()
    save_asm_file(program, tmp_path / "prog.s")
    text = (tmp_path / "prog.s").read_text()
    assert '.constants "prog.constants.npz"\n' in text
    with np.load(tmp_path / "prog.constants.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == ["i::i32", "s::fp8e5", "w.0::bf16"]
        assert npz["w.0::bf16"].dtype == np.uint16 and npz["s::fp8e5"].dtype == np.uint8
    loaded = load_asm_file(tmp_path / "prog.s")
    assert loaded.constants_file == "prog.constants.npz"
    assert_same_program(loaded, program)
    assert loaded.constants["w.0"].dtype == ml_dtypes.bfloat16
    assert print_program(loaded) == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.constants.npz", "prog.s"]


def test_constants_mapping_is_checked_against_declarations(tmp_path) -> None:
    program = constants_program()
    text = print_program(program)
    wrong = {**program.constants, "w.0": program.constants["w.0"].astype(np.float32)}
    with pytest.raises(AsmError, match=r"^4:9: constant 'w.0': data is f32\[2, 3\] but the tensor is "
                                       r"declared bf16\[2, 3\]"):
        parse_program(text, constants=wrong)
    with pytest.raises(AsmError, match="^6:9: no constant data for const tensor 'i'"):
        parse_program(text, constants={k: v for k, v in program.constants.items() if k != "i"})
    with pytest.raises(AsmError, match="constant 'x': is not a declared const tensor"):
        parse_program(text, constants={**program.constants, "x": np.zeros((2, 3), ml_dtypes.bfloat16)})
    with pytest.raises(ProgramError, match="constant 'w.0': data is f32"):
        save_asm_file(replace(program, constants=wrong), tmp_path / "bad.s")
    assert list(tmp_path.iterdir()) == []


def test_constants_file_errors(tmp_path) -> None:
    (tmp_path / "a.s").write_text('.target trn1\n.constants "missing.npz"\n')
    with pytest.raises(AsmError, match=r"a.s:2:12: cannot read constants file 'missing.npz': No such file"):
        load_asm_file(tmp_path / "a.s")
    np.savez(tmp_path / "bad.npz", w=np.zeros(2))
    with pytest.raises(ValueError, match="entry 'w' is not NAME::DTYPE"):
        read_constants(tmp_path / "bad.npz")
    np.save(tmp_path / "plain.npy", np.zeros(2))
    with pytest.raises(ValueError, match="not an .npz archive"):
        read_constants(tmp_path / "plain.npy")
    (tmp_path / "b.s").write_text('.target trn1\n.constants "bad.npz"\n')
    with pytest.raises(AsmError, match="2:12: cannot read constants file 'bad.npz': entry 'w'"):
        load_asm_file(tmp_path / "b.s")
