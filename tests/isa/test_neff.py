"""The .neff container: exact round trips, the documented layout, and every NeffError case."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from isa import instructions as instructions_table
from isa import neff
from isa.asm import parse_program, print_program
from isa.errors import NeffError, ProgramError
from isa.instructions import AttrSpec, OpcodeSpec, OperandSpec
from isa.program import AccessPattern, Instruction, Program
from tests.isa.test_asm import assert_same_program, constants_program, every_opcode_program, programs


def _full_program() -> Program:
    """Every opcode and dtype, with bf16, fp8 and 0-d constants."""
    program = every_opcode_program()
    program.add_tensor("s", "const", "fp8e5", (4,))
    program.add_tensor("i", "const", "i32", ())
    program.constants = {"w.0": (np.arange(64).reshape(8, 8) * 0.37).astype(ml_dtypes.bfloat16),
                         "s": constants_program().constants["s"], "i": np.array(-7, np.int32)}
    return program


def _split(data: bytes) -> tuple[int, int, dict[int, bytes]]:
    """Read a container by the layout documented in isa/neff.py (independently of the module)."""
    magic, version, flags, count, length = struct.unpack_from("<4sHHIQ", data)
    assert (magic, length) == (b"NEFF", len(data))
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]
    sections = {}
    for i in range(count):
        kind, offset, size = struct.unpack_from("<IQQ", data, 20 + 20 * i)
        sections[kind] = data[offset:offset + size]
    return version, flags, sections


def _join(sections: dict[int, bytes], version: int = neff.FORMAT_VERSION, flags: int = 0) -> bytes:
    offset = 20 + 20 * len(sections)
    length = offset + sum(map(len, sections.values())) + 32
    out = bytearray(struct.pack("<4sHHIQ", b"NEFF", version, flags, len(sections), length))
    for kind, body in sections.items():
        out += struct.pack("<IQQ", kind, offset, len(body))
        offset += len(body)
    out += b"".join(sections.values())
    return bytes(out + hashlib.sha256(out).digest())


def test_every_opcode_and_dtype_round_trip_exactly() -> None:
    program = _full_program()
    data = neff.encode(program)
    decoded = neff.decode(data)
    assert_same_program(decoded, program)
    assert decoded.instructions[0].comment == "op 0" and decoded.instructions[0].line is None
    assert neff.encode(decoded) == data
    text = print_program(decoded)
    assert neff.encode(parse_program(text, constants=program.constants)) == data


def test_layout_matches_the_documentation() -> None:
    program = _full_program()
    version, flags, sections = _split(neff.encode(program))
    assert (version, flags, sorted(sections)) == (3, 0, [1, 2, 3, 4])
    header = json.loads(sections[1])
    assert header["tensors"][1] == ["w.0", "const", "bf16", [8, 8]]
    assert header["constants"][0] == {"name": "w.0", "dtype": "bf16", "shape": [8, 8], "offset": 0,
                                      "nbytes": 128}
    assert sections[4][:128] == program.constants["w.0"].tobytes()
    count, first = struct.unpack_from("<I", sections[2]) + struct.unpack_from("<I", sections[2], 4)
    assert first == 0  # string 0 is ""
    n, code, engine, operands = struct.unpack_from("<IHBB", sections[3])
    assert (n, code, engine, operands) == (len(program.instructions), 1, 0, 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(with_constants=True))
def test_random_programs_round_trip(program: Program) -> None:
    data = neff.encode(program)
    decoded = neff.decode(data)
    assert_same_program(decoded, program)
    assert neff.encode(decoded) == data


def _careful_encode(program: Program) -> bytes:
    """``neff.encode`` with its fast instruction encoder refusing everything (the careful one writes it all)."""
    def refuse(self, instr, out):
        raise RuntimeError("fast encoder off")
    original = neff.FastEncoder.encode
    neff.FastEncoder.encode = refuse
    try:
        return neff.encode(program)
    finally:
        neff.FastEncoder.encode = original


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(with_constants=True))
def test_fast_encoder_writes_the_careful_encoders_bytes(program: Program) -> None:
    assert neff.encode(program) == _careful_encode(program)


def _both_decoders(data: bytes) -> tuple[list[Instruction], list[Instruction]]:
    """The instructions of ``data`` by the fast decoder and by the careful, field-by-field one."""
    version, _, sections = _split(data)
    header = json.loads(sections[1])
    tensors, strings = [t[0] for t in header["tensors"]], neff._decode_strings(sections[2])
    fast = neff._decode_fast(sections[3], tensors, strings, version)
    reader = neff._Reader(sections[3], "instructions")
    (count,) = reader.read(neff._U32, "count")
    careful = [neff._decode_instruction(reader, i, tensors, strings, version) for i in range(count)]
    reader.finish()
    return fast, careful


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(with_constants=True))
def test_fast_decoder_gives_the_careful_decoders_instructions(program: Program) -> None:
    fast, careful = _both_decoders(neff.encode(program))
    assert repr(fast) == repr(careful)  # the repr tells 1 from 1.0
    assert fast == careful


def test_fast_decoder_on_every_opcode_and_a_compiled_program() -> None:
    compiled = (Path(__file__).parent / "data" / "emulator" / "hf_gpt2.neff").read_bytes()
    for data in (neff.encode(_full_program()), compiled):
        fast, careful = _both_decoders(data)
        assert repr(fast) == repr(careful)
        # patterns decoded once per encoding and shared, as the compiler shares them
        assert len({id(ap) for i in fast for ap in i.operands.values()}) == len(
            {ap for i in careful for ap in i.operands.values()})


def test_fast_encoder_falls_back_without_a_trace() -> None:
    """An instruction the fast encoder refuses midway (a float attribute given as text, which the careful
    encoder converts) leaves no stray bytes or strings: the file is the careful encoder's."""
    program = _full_program()
    odd = next(i for i in program.instructions if any(a.kind is float for a in
                                                      instructions_table.OPCODES[i.opcode].attrs))
    name = next(a.name for a in instructions_table.OPCODES[odd.opcode].attrs if a.kind is float)
    odd.attrs[name] = "0.25"
    odd.comment = "a comment the fast encoder may have added to the string table first"
    data = neff.encode(program)
    assert data == _careful_encode(program)
    decoded = neff.decode(data)
    assert decoded.instructions[program.instructions.index(odd)].attrs[name] == 0.25
    assert neff.encode(_full_program()) == _careful_encode(_full_program())


def test_free_string_attribute_uses_the_string_table(monkeypatch) -> None:
    spec = OpcodeSpec("label", ("pe",), (OperandSpec("dst", "w", ("psum",)),),
                      (AttrSpec("name", str, "x"), AttrSpec("n", int, 0)), "sync", 99, "Test only.")
    monkeypatch.setitem(instructions_table.OPCODES, "label", spec)
    monkeypatch.setitem(instructions_table.OPCODE_BY_CODE, 99, spec)
    program = Program("trn1", instructions=[
        Instruction("pe", "label", {"dst": AccessPattern("psum", "f32", 0, ())},
                    {"name": 'a "label" é', "n": 3}, comment="c"),
        Instruction("pe", "label", {"dst": AccessPattern("psum", "f32", 0, ())}, {"name": "c", "n": 4}),
    ])
    decoded = neff.decode(neff.encode(program))
    assert_same_program(decoded, program)
    strings = _split(neff.encode(program))[2][2]
    assert strings.count(b"label") == 1 and strings.count(b"c\x00") == 0  # "c" stored once
    text = print_program(program)
    assert 'name="a \\"label\\" \\u00e9"' in text
    assert_same_program(parse_program(text), program)


def test_attributes_added_to_the_table_later_take_their_defaults(monkeypatch) -> None:
    """A file records how many attributes it wrote: one written before the table grew still decodes."""
    old = OpcodeSpec("label", ("pe",), (), (AttrSpec("n", int, 0),), "sync", 99, "Test only.")
    grown = replace(old, attrs=(*old.attrs, AttrSpec("mode", str, "fast", ("fast", "slow"), optional=True),
                                AttrSpec("gain", float, 1.5, optional=True)))
    monkeypatch.setitem(instructions_table.OPCODE_BY_CODE, 99, old)
    monkeypatch.setitem(instructions_table.OPCODES, "label", old)
    data = neff.encode(Program("trn1", instructions=[Instruction("pe", "label", attrs={"n": 7})]))
    monkeypatch.setitem(instructions_table.OPCODE_BY_CODE, 99, grown)
    monkeypatch.setitem(instructions_table.OPCODES, "label", grown)
    (instr,) = neff.decode(data).instructions
    assert instr.attrs == {"n": 7, "mode": "fast", "gain": 1.5}
    assert print_program(neff.decode(data)).splitlines()[-1] == "pe.label n=7"  # optional: not printed
    required = replace(grown, attrs=(*grown.attrs, AttrSpec("must", int, None)))
    monkeypatch.setitem(instructions_table.OPCODE_BY_CODE, 99, required)
    with pytest.raises(NeffError, match="instruction 0: required attribute 'must' is missing"):
        neff.decode(data)
    monkeypatch.setitem(instructions_table.OPCODE_BY_CODE, 99, replace(old, attrs=()))
    with pytest.raises(NeffError, match="instruction 0: label has 0 attributes, not 1"):
        neff.decode(data)


def test_wrong_magic_names_the_first_bytes() -> None:
    with pytest.raises(NeffError, match=r"not a .neff file: it starts with b'PK\\x03\\x04"):
        neff.decode(b"PK\x03\x04" + bytes(100))


@pytest.mark.parametrize("keep", [0, 2, 19, 20, 100, -1])
def test_truncated_file(keep: int) -> None:
    data = neff.encode(_full_program())
    keep = keep % len(data)
    expected = "expected at least 52 bytes" if keep < 20 else f"expected {len(data)} bytes"
    with pytest.raises(NeffError, match=rf"^truncated .neff file: {expected}, got {keep}$"):
        neff.decode(data[:keep])


def test_flipped_byte_fails_the_checksum() -> None:
    data = bytearray(neff.encode(_full_program()))
    for position in (100, len(data) // 2, len(data) - 40, len(data) - 1):
        corrupt = bytearray(data)
        corrupt[position] ^= 0x10
        with pytest.raises(NeffError, match="^checksum mismatch: the .neff file is corrupted"):
            neff.decode(bytes(corrupt))


def test_future_version_and_unknown_flags() -> None:
    _, _, sections = _split(neff.encode(_full_program()))
    for version in (1, 4):
        with pytest.raises(NeffError, match=rf"unsupported .neff format version {version} \(this neuronc reads "
                                            r"versions 2, 3\); compile the model again"):
            neff.decode(_join(sections, version=version))
    with pytest.raises(NeffError, match="unsupported .neff flags 0x0002"):
        neff.decode(_join(sections, flags=2))
    with pytest.raises(NeffError, match="external-weights flag and the header's 'weights' disagree"):
        neff.decode(_join(sections, flags=1))
    with pytest.raises(NeffError, match="3 unexpected bytes after its end"):
        neff.decode(_join(sections) + b"abc")


def _instruction_section(opcode: int, tail: bytes = b"") -> bytes:
    return struct.pack("<IHBB", 1, opcode, 0, 0) + tail


MALFORMED = [
    ({1: b"{not json"}, "malformed header section: not a JSON object"),
    ({1: b'{"target": 3}'}, "malformed header section: missing or bad 'target'"),
    ({3: _instruction_section(77)}, "malformed instructions section: instruction 0: unknown opcode code 77"),
    ({3: _instruction_section(11)}, "malformed instructions section: ends inside instruction 0 at byte 8"),
    ({3: _instruction_section(11, struct.pack("<BIIHH", 0, 0, 0, 0, 0) + b"x")},
     "malformed instructions section: 1 stray bytes at its end"),
    ({3: _instruction_section(11, struct.pack("<BIIHH", 0, 10**6, 0, 0, 0))},
     "malformed instructions section: instruction 0: string index 1000000 out of range"),
    ({2: struct.pack("<II", 1, 5) + b"ab"}, "malformed strings section: ends inside string 0"),
    ({4: b""}, "malformed constants section: 'w.0': 128 bytes at 0 do not hold bf16[8, 8] within 0 bytes"),
]


@pytest.mark.parametrize(("changes", "message"), MALFORMED, ids=[m[:50] for _, m in MALFORMED])
def test_malformed_sections(changes: dict[int, bytes], message: str) -> None:
    _, _, sections = _split(neff.encode(_full_program()))
    with pytest.raises(NeffError, match="^" + message.replace("[", r"\[").replace("(", r"\(")):
        neff.decode(_join({**sections, **changes}))


def test_malformed_section_table() -> None:
    _, _, sections = _split(neff.encode(_full_program()))
    with pytest.raises(NeffError, match="malformed section table: no constants section"):
        neff.decode(_join({k: v for k, v in sections.items() if k != 4}))
    with pytest.raises(NeffError, match="malformed section table: entry 4 has unknown kind 9"):
        neff.decode(_join({**sections, 9: b""}))
    data = bytearray(_join(sections))
    struct.pack_into("<Q", data, 20 + 4, 10**6)  # header section offset far past the end
    data[-32:] = hashlib.sha256(data[:-32]).digest()
    with pytest.raises(NeffError, match=r"malformed section table: header section \[1000000, "):
        neff.decode(bytes(data))


def test_encode_rejects_what_it_cannot_hold() -> None:
    program = Program("trn1", instructions=[Instruction("sp", "dma", {
        "dst": AccessPattern("sbuf", "f32", 0, ()),
        "src": AccessPattern("hbm", "f32", 0, (), tensor="nowhere")})])
    with pytest.raises(ProgramError, match=r"instruction 0 \(sp.dma\): access pattern names undeclared "
                                           "tensor 'nowhere'"):
        neff.encode(program)
    with pytest.raises(ProgramError, match="unknown opcode 'teleport'"):
        neff.encode(Program("trn1", instructions=[Instruction("pe", "teleport")]))
    with pytest.raises(ProgramError, match="constant 'w.0': data is f32"):
        neff.encode(replace(constants_program(), constants={"w.0": np.zeros((2, 3), np.float32)}))
    with pytest.raises(ProgramError, match=r"^instruction 0 \(pe.nop\): a value is out of the range of its "
                                           "binary field"):
        neff.encode(Program("trn1", instructions=[Instruction("pe", "nop", signals=[-1])]))


def test_save_and_load(tmp_path, monkeypatch) -> None:
    program = _full_program()
    path = tmp_path / "model.neff"
    neff.save(program, path)
    assert_same_program(neff.load(path), program)
    before = path.read_bytes()
    with pytest.raises(ProgramError):
        neff.save(Program("trn1", instructions=[Instruction("pe", "teleport")]), path)

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        neff.save(Program("trn2"), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.neff"]  # no temp file left behind


def test_load_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(NeffError, match=r"missing.neff: cannot read: No such file"):
        neff.load(tmp_path / "missing.neff")
    (tmp_path / "model.s").write_text("; neuronc ISA program\n")
    with pytest.raises(NeffError, match=r"model.s: not a .neff file: it starts with b'; neuron'"):
        neff.load(tmp_path / "model.s")


def test_saved_file_follows_the_umask(tmp_path):
    import os

    from isa.constants import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "x.neff", b"data")
    finally:
        os.umask(old)
    assert (tmp_path / "x.neff").stat().st_mode & 0o777 == 0o644
