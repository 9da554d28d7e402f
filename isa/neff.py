"""The binary .neff container of a Program: ``encode``/``decode`` bytes, ``save``/``load`` files.

Layout (every integer little-endian)::

    offset 0   magic        4 bytes  b"NEFF"
           4   version      u16      FORMAT_VERSION (3; version 2 is still read)
           6   flags        u16      bit 0: external weights (below); other bits are rejected
           8   sections     u32      entries in the section table
          12   length       u64      total file length in bytes, checksum included
          20   section table         per section: kind u32, offset u64, length u64
          ..   sections              at their offsets, in table order
    length-32  checksum     32 bytes SHA-256 of bytes [0, length - 32)

Sections (kind: content), each exactly once:

1 header        UTF-8 JSON (never pickle): ``target``, ``tensors`` (``[name, kind, dtype, shape]`` in
                declaration order), ``inputs``, ``outputs``, ``meta`` (non-finite floats are written
                as JSON ``Infinity``/``NaN``) and ``constants`` (``{name, dtype, shape, offset,
                nbytes}``, offsets into the constants section) and ``origins`` (version 3: HLO
                name -> ``{flops, hbm_bytes, sources: [[module, op, location], ...]}``).
2 strings       u32 count, then per string: u32 byte length and UTF-8 bytes. String 0 is "".
3 instructions  u32 count, then per instruction, driven by the OPCODES table:
                u16 opcode code, u8 engine (index in program.ENGINES), u8 operand count;
                per operand: u8 index in the opcode's operand table, then the access pattern:
                u8 memory (index in program.MEMORIES), u8 dtype code, u8 pair count, u8 0,
                i32 start partition, i32 partitions, i64 byte offset, i64 partition stride,
                i32 tensor (index in the header's tensors; -1 for none), pairs x (i64 stride, i64 count);
                u8 attribute count A, then the first A attributes in table order: int i64,
                float f64, str with choices u16 index into them, other str u32 string index
                (attributes the table gained after the file was written take their defaults);
                u32 comment (string index, 0 = none); version 3: u32 origin (string index,
                0 = none: the HLO instruction or fusion the instruction was emitted for);
                u16 wait count, waits x (u32 semaphore, u32 value); u16 signal count, u32 each.
4 constants     the raw little-endian C-order bytes of each constant array.

Control flow: the header's optional ``labels`` maps each label (``Instruction.label``, a branch target) to
its instruction's number; a program without labels has no such key.

External weights (flag bit 0; ``save(..., weights="external")``, or ``auto`` above 16 MiB): the
constants section is empty, the header's ``constants`` is ``[]`` and its ``weights`` is ``{file,
id, tensors: [[name, dtype, shape], ...]}``: the safetensors side file beside the .neff
(``isa.weights``), memory-mapped at load; ``id`` (``xxh3-128:`` and the XXH3-128 of the constants; a
bare SHA-256 hex digest in files written before) must match the file's.

What the container keeps: everything in a Program except ``Instruction.line`` (a position in a
.s text; decoded as None) and ``Program.constants_file`` (a text-form detail). Instruction comments
are kept (``neuronc disasm`` shows them). Absent attributes are written as their defaults, as in the
text form. The container checks structure only; which engine or memory an instruction may use is
the assembler's and emulator's business. Version 2 (no origins) is read with empty origins; version 1
(no attribute count) is not read: compile again.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import struct
from collections.abc import Callable
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from isa import weights as side_weights
from isa.collector import long_lived
from isa.constants import constant_problems, isa_dtype_of, write_atomic
from isa.dtypes import DTYPE_BY_CODE, DTYPES
from isa.errors import NeffError, ProgramError
from isa.instructions import OPCODE_BY_CODE, OPCODES, AttrSpec
from isa.neff_codec import (
    _ATTR_COUNT,
    _ATTR_STRUCTS,
    _CHOICE,
    _INSTR_HEAD,
    _OPERAND_INDEX,
    _PAIR,
    _PATTERN_HEAD,
    _STRING,
    _U16,
    _U32,
    _WAIT,
    FastEncoder,
    _decode_fast,
    _Malformed,
    _strings_fast,
)
from isa.program import (
    ENGINES,
    MEMORIES,
    TENSOR_KINDS,
    AccessPattern,
    Instruction,
    Origin,
    Program,
    Source,
    TensorDecl,
)

MAGIC = b"NEFF"
FORMAT_VERSION = 3
READABLE_VERSIONS = (2, 3)  # 2: no origin per instruction, no origins table
SECTION_HEADER, SECTION_STRINGS, SECTION_INSTRUCTIONS, SECTION_CONSTANTS = 1, 2, 3, 4
SECTION_NAMES = {SECTION_HEADER: "header", SECTION_STRINGS: "strings",
                 SECTION_INSTRUCTIONS: "instructions", SECTION_CONSTANTS: "constants"}

FLAG_EXTERNAL_WEIGHTS = 1  # the constants live in a safetensors side file (isa.weights), not in section 4
WEIGHTS_MODES = ("auto", "inline", "external")
AUTO_EXTERNAL_BYTES = 16 << 20  # weights="auto": constants above this size go to the side file

_FILE_HEADER = struct.Struct("<4sHHIQ")
_SECTION_ENTRY = struct.Struct("<IQQ")
_CHECKSUM_BYTES = hashlib.sha256().digest_size


# ------------------------------------------------------------------------------------------ encode

def encode(program: Program, *, weights: dict[str, Any] | None = None) -> bytes:
    """The .neff bytes of ``program``. Raises ProgramError for what the container cannot hold.
    ``weights`` (``{"file", "id"}``): the constants are in that side file, not in the container."""
    strings = _StringTable()
    tensor_index = {name: i for i, name in enumerate(program.tensors)}
    instructions = bytearray(_U32.pack(len(program.instructions)))
    fast = FastEncoder(tensor_index, strings.add)
    for number, instr in enumerate(program.instructions):
        mark, known_strings = len(instructions), len(strings.index)
        try:
            fast.encode(instr, instructions)
            continue
        except Exception:  # noqa: BLE001 - anything unusual: undone, and encoded by the careful encoder below
            del instructions[mark:]
            strings.truncate(known_strings)
        try:
            instructions += _encode_instruction(instr, tensor_index, strings)
        except (struct.error, TypeError, ValueError, KeyError) as e:
            problem = f"a value is out of the range of its binary field ({e})" if isinstance(
                e, struct.error) else e.args[0] if e.args else str(e)
            raise ProgramError(f"instruction {number} ({instr.engine}.{instr.opcode}): {problem}") from None
    if weights is None:
        constants, constant_entries = _encode_constants(program)
    else:
        constants, constant_entries = b"", []
    header = {
        "target": program.target,
        "tensors": [[d.name, d.kind, d.dtype, list(d.shape)] for d in program.tensors.values()],
        "inputs": list(program.inputs),
        "outputs": list(program.outputs),
        "meta": {key: _meta_value(key, value) for key, value in program.meta.items()},
        "constants": constant_entries,
        "origins": {name: _origin_entry(name, origin) for name, origin in program.origins.items()},
    }
    labels = {instr.label: number for number, instr in enumerate(program.instructions) if instr.label}
    if labels:  # control flow: branch targets (an optional key; absent in straight-line programs)
        header["labels"] = labels
    if weights is not None:
        header["weights"] = {**weights, "tensors": [[name, isa_dtype_of(a).name, list(np.shape(a))]
                                                    for name, a in program.constants.items()]}
    return container([(SECTION_HEADER, json.dumps(header).encode()), (SECTION_STRINGS, strings.encode()),
                      (SECTION_INSTRUCTIONS, instructions), (SECTION_CONSTANTS, constants)],
                     0 if weights is None else FLAG_EXTERNAL_WEIGHTS)


def container(sections: list[tuple[int, bytes | bytearray]], flags: int) -> bytes:
    """The file of these (kind, body) sections, in order: file header, section table, bodies, checksum."""
    offset = _FILE_HEADER.size + _SECTION_ENTRY.size * len(sections)
    length = offset + sum(len(body) for _, body in sections) + _CHECKSUM_BYTES
    out = bytearray(_FILE_HEADER.pack(MAGIC, FORMAT_VERSION, flags, len(sections), length))
    for kind, body in sections:
        out += _SECTION_ENTRY.pack(kind, offset, len(body))
        offset += len(body)
    for _, body in sections:
        out += body
    out += hashlib.sha256(out).digest()
    return bytes(out)


def save(program: Program, path: str | os.PathLike, *, weights: str = "auto") -> str | None:
    """Write ``program`` to ``path`` atomically (a failure leaves no partial file).

    ``weights``: ``inline`` keeps the constants in the .neff; ``external`` writes them to the
    safetensors side file ``isa.weights.side_path(path)`` (memory-mapped when loaded; the .neff
    records its name and id); ``auto`` is external above AUTO_EXTERNAL_BYTES of constants.
    Returns the weights id when they went to the side file. Constants still mapped from a side file
    (``isa.weights.read``) are linked or copied from it instead of written again."""
    if weights not in WEIGHTS_MODES:
        raise ProgramError(f"weights={weights!r} is not one of {', '.join(WEIGHTS_MODES)}")
    path = Path(path)
    nbytes = sum(np.asarray(a).nbytes for a in program.constants.values())
    if weights == "inline" or (weights == "auto" and nbytes <= AUTO_EXTERNAL_BYTES):
        write_atomic(path, encode(program))
        return None
    for name, problem in constant_problems(program.tensors, program.constants):
        raise ProgramError(f"constant {name!r}: {problem}")
    side = side_weights.side_path(path)
    known = side_weights.known_file(program.constants)
    if known is not None:
        source, ident = known
        side_weights.link_or_copy(source, side)
    else:
        ident = side_weights.weights_id(program.constants)
        side_weights.write(side, program.constants, ident)
    write_atomic(path, encode(program, weights={"file": side.name, "id": ident}))
    return ident


class _StringTable:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def add(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"{text!r} is not a string")
        return self.index.setdefault(text, len(self.index))

    def truncate(self, count: int) -> None:
        """Forget the strings added after the first ``count``."""
        for text in list(self.index)[count:]:
            del self.index[text]

    def encode(self) -> bytes:
        out = bytearray(_U32.pack(len(self.index)))
        for text in self.index:
            raw = text.encode()
            out += _U32.pack(len(raw)) + raw
        return bytes(out)


def _encode_instruction(instr: Instruction, tensor_index: dict[str, int], strings: _StringTable) -> bytes:
    spec = OPCODES.get(instr.opcode)
    if spec is None:
        raise KeyError(f"unknown opcode {instr.opcode!r}")
    if instr.engine not in ENGINES:
        raise KeyError(f"unknown engine {instr.engine!r}")
    names = [o.name for o in spec.operands]
    known = {*names, *(a.name for a in spec.attrs)}
    unknown = [n for n in [*instr.operands, *instr.attrs] if n not in known]
    if unknown:
        raise KeyError(f"no operand or attribute {unknown[0]!r}")
    out = bytearray(_INSTR_HEAD.pack(spec.code, ENGINES.index(instr.engine), len(instr.operands)))
    for index, name in enumerate(names):
        if name in instr.operands:
            out += _OPERAND_INDEX.pack(index) + _encode_pattern(instr.operands[name], tensor_index)
    out += _ATTR_COUNT.pack(len(spec.attrs))
    for attr in spec.attrs:
        value = instr.attrs.get(attr.name, attr.default)
        if value is None:
            raise KeyError(f"missing attribute {attr.name!r}")
        out += _encode_attr(attr, value, strings)
    out += _U32.pack(strings.add(instr.comment))
    out += _U32.pack(strings.add(instr.origin))
    out += _U16.pack(len(instr.waits)) + b"".join(_WAIT.pack(sem, value) for sem, value in instr.waits)
    out += _U16.pack(len(instr.signals)) + b"".join(_U32.pack(sem) for sem in instr.signals)
    return bytes(out)


def _encode_pattern(ap: AccessPattern, tensor_index: dict[str, int]) -> bytes:
    if ap.memory not in MEMORIES or ap.dtype not in DTYPES:
        raise ValueError(f"access pattern with memory {ap.memory!r} and dtype {ap.dtype!r}")
    if ap.tensor is not None and ap.tensor not in tensor_index:
        raise KeyError(f"access pattern names undeclared tensor {ap.tensor!r}")
    tensor = -1 if ap.tensor is None else tensor_index[ap.tensor]
    head = _PATTERN_HEAD.pack(MEMORIES.index(ap.memory), DTYPES[ap.dtype].code, len(ap.pattern),
                              ap.start_partition, ap.partitions, ap.offset, ap.partition_stride, tensor)
    return head + b"".join(_PAIR.pack(stride, count) for stride, count in ap.pattern)


def _encode_attr(attr: AttrSpec, value: Any, strings: _StringTable) -> bytes:
    if attr.kind is int:
        return _ATTR_STRUCTS[int].pack(operator.index(value))
    if attr.kind is float:
        return _ATTR_STRUCTS[float].pack(float(value))
    if not attr.choices:
        return _STRING.pack(strings.add(value))
    if value not in attr.choices:
        raise ValueError(f"{attr.name}={value!r} is not one of {', '.join(attr.choices)}")
    return _CHOICE.pack(attr.choices.index(value))


def _encode_constants(program: Program) -> tuple[bytes, list[dict[str, Any]]]:
    for name, problem in constant_problems(program.tensors, program.constants):
        raise ProgramError(f"constant {name!r}: {problem}")
    return _encode_constants_of(program.constants)


def _encode_constants_of(constants: dict[str, np.ndarray]) -> tuple[bytes, list[dict[str, Any]]]:
    """The constants section and the header's entries of these (checked) arrays."""
    blob, entries = bytearray(), []
    for name, array in constants.items():
        raw = np.require(array, requirements="C").tobytes()
        entries.append({"name": name, "dtype": isa_dtype_of(array).name, "shape": list(array.shape),
                        "offset": len(blob), "nbytes": len(raw)})
        blob += raw
    return bytes(blob), entries


def _origin_entry(name: str, origin: Origin) -> dict[str, Any]:
    if not isinstance(name, str) or not all(isinstance(f, str) for s in origin.sources
                                            for f in (s.module, s.op, s.location)):
        raise ProgramError(f"origin {name!r}: names, modules, ops and locations must be strings")
    try:
        flops, hbm_bytes = operator.index(origin.flops), operator.index(origin.hbm_bytes)
    except TypeError:
        raise ProgramError(f"origin {name!r}: flops and hbm_bytes must be integers") from None
    return {"flops": flops, "hbm_bytes": hbm_bytes,
            "sources": [[s.module, s.op, s.location] for s in origin.sources]}


def _meta_value(key: str, value: object) -> int | float | str:
    if isinstance(value, str):
        return value
    if isinstance(value, float | np.floating):
        return float(value)
    try:
        return operator.index(value)
    except TypeError:
        raise ProgramError(f"meta {key}={value!r} is not int, float or str") from None


# ------------------------------------------------------------------------------------------ decode

def load(path: str | os.PathLike, *, verify_weights: bool = False) -> Program:
    """Read a .neff file (and map its weights side file, if it has one; ``verify_weights`` hashes
    the weights again); NeffError messages start with the path."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise NeffError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return decode(data, weights_dir=Path(path).parent, verify_weights=verify_weights)
    except NeffError as e:
        message = str(e)
        raise NeffError(message if message.startswith(str(Path(path).parent)) else f"{path}: {e}") from None


def read_weights_ref(path: str | os.PathLike) -> tuple[str, str] | None:
    """(side file name, weights id) of the .neff at ``path``, None when its weights are inline."""
    data = Path(path).read_bytes()
    version, sections = _check_container(data)
    ref = _decode_header(sections[SECTION_HEADER], version).get("weights")
    return (str(ref["file"]), str(ref["id"])) if isinstance(ref, dict) else None


def decode(data: bytes, *, weights_dir: str | os.PathLike | None = None, verify_weights: bool = False) -> Program:
    """The Program in .neff bytes. Raises NeffError for a foreign, truncated, corrupt or newer file.
    ``weights_dir``: where the weights side file of a .neff without inlined weights is.

    Its objects (~7 per instruction) live as long as the program: made with the collector paused, then moved
    to the oldest generation unscanned (``isa.collector.long_lived``)."""
    with long_lived():
        return _decode(bytes(data), weights_dir, verify_weights)


def _decode(data: bytes, weights_dir: str | os.PathLike | None, verify_weights: bool) -> Program:
    version, sections = _check_container(data)
    header = _decode_header(sections[SECTION_HEADER], version)
    external = bool(_FILE_HEADER.unpack_from(data)[2] & FLAG_EXTERNAL_WEIGHTS)
    if external != isinstance(header.get("weights"), dict):
        raise _malformed("header", "the external-weights flag and the header's 'weights' disagree")
    strings = _decode_strings(sections[SECTION_STRINGS])
    program = Program(header["target"], inputs=header["inputs"], outputs=header["outputs"],
                      meta=header["meta"], origins=_decode_origins(header.get("origins", {})))
    for name, kind, dtype, shape in header["tensors"]:
        program.tensors[name] = TensorDecl(name, kind, dtype, tuple(shape))
    for kind, names in (("input", program.inputs), ("output", program.outputs)):
        for name in names:
            decl = program.tensors.get(name)
            if decl is None or decl.kind != kind:
                raise NeffError(f"malformed program: its {kind} {name!r} is not a declared {kind} tensor")
    program.instructions = _decode_instructions(sections[SECTION_INSTRUCTIONS], list(program.tensors),
                                                strings, version)
    labels = header.get("labels", {})
    count = len(program.instructions)
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, int) and 0 <= v < count
                                               for k, v in labels.items()):
        raise _malformed("header", "bad 'labels' (label -> instruction number)")
    for name, number in labels.items():
        program.instructions[number].label = name
    if not external:
        program.constants = _decode_constants(sections[SECTION_CONSTANTS], header["constants"])
        return program
    if weights_dir is None:
        raise NeffError("this .neff keeps its weights in a side file: load it from its path (isa.neff.load)")
    ref = header["weights"]
    try:
        expected = {name: (dtype, tuple(shape)) for name, dtype, shape in ref["tensors"]}
        file, ident = Path(weights_dir) / ref["file"], str(ref["id"])
    except (KeyError, TypeError, ValueError):
        raise _malformed("header", "bad 'weights' entry") from None
    program.constants = side_weights.read(file, ident, expected, verify=verify_weights)
    return program


def _check_container(data: bytes) -> tuple[int, dict[int, bytes]]:
    """Check magic, version, length and checksum; return the version and the body of each section by kind."""
    if data[:4] != MAGIC[:len(data[:4])]:
        raise NeffError(f"not a .neff file: it starts with {data[:8]!r}, a .neff file with {MAGIC!r}")
    minimum = _FILE_HEADER.size + _CHECKSUM_BYTES
    if len(data) < _FILE_HEADER.size:
        raise NeffError(f"truncated .neff file: expected at least {minimum} bytes, got {len(data)}")
    _, version, flags, count, length = _FILE_HEADER.unpack_from(data)
    if version not in READABLE_VERSIONS:
        raise NeffError(f"unsupported .neff format version {version} (this neuronc reads versions "
                        f"{', '.join(map(str, READABLE_VERSIONS))}); compile the model again with this neuronc")
    if len(data) < length:
        raise NeffError(f"truncated .neff file: expected {length} bytes, got {len(data)}")
    if len(data) > length:
        raise NeffError(f"malformed .neff file: {len(data) - length} unexpected bytes after its end "
                        f"(length {length})")
    if length < minimum:
        raise NeffError(f"malformed .neff file: length {length} is below the minimum {minimum}")
    body_end = length - _CHECKSUM_BYTES
    stored, computed = data[body_end:], hashlib.sha256(data[:body_end]).digest()
    if stored != computed:
        raise NeffError(f"checksum mismatch: the .neff file is corrupted (stored SHA-256 "
                        f"{stored.hex()[:16]}..., computed {computed.hex()[:16]}...)")
    if flags & ~FLAG_EXTERNAL_WEIGHTS:
        raise NeffError(f"unsupported .neff flags {flags:#06x} (this neuronc defines only "
                        f"{FLAG_EXTERNAL_WEIGHTS:#06x}, external weights)")
    table_end = _FILE_HEADER.size + _SECTION_ENTRY.size * count
    if table_end > body_end:
        raise NeffError(f"malformed section table: {count} sections do not fit in {length} bytes")
    sections: dict[int, bytes] = {}
    for i in range(count):
        kind, offset, size = _SECTION_ENTRY.unpack_from(data, _FILE_HEADER.size + _SECTION_ENTRY.size * i)
        if kind not in SECTION_NAMES or kind in sections:
            problem = "a second" if kind in sections else "unknown"
            raise NeffError(f"malformed section table: entry {i} has {problem} kind {kind}")
        if offset < table_end or offset + size > body_end:
            raise NeffError(f"malformed section table: {SECTION_NAMES[kind]} section [{offset}, "
                            f"{offset + size}) lies outside [{table_end}, {body_end})")
        sections[kind] = data[offset:offset + size]
    missing = [name for kind, name in SECTION_NAMES.items() if kind not in sections]
    if missing:
        raise NeffError(f"malformed section table: no {', '.join(missing)} section")
    return version, sections


def _malformed(section: str, what: str) -> NeffError:
    return NeffError(f"malformed {section} section: {what}")


def _decode_header(body: bytes, version: int) -> dict[str, Any]:
    try:
        header = json.loads(body.decode())
        checks: dict[str, Callable[[Any], bool]] = {
            "target": lambda v: isinstance(v, str),
            "tensors": lambda v: isinstance(v, list) and all(
                isinstance(t, list) and len(t) == 4 and isinstance(t[0], str) and t[1] in TENSOR_KINDS
                and t[2] in DTYPES and isinstance(t[3], list) for t in v),
            "inputs": lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
            "outputs": lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
            "meta": lambda v: isinstance(v, dict) and all(isinstance(x, int | float | str) for x in v.values()),
            "constants": lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v),
        }
        if version >= 3:
            checks["origins"] = lambda v: isinstance(v, dict) and all(
                isinstance(o, dict) and isinstance(o.get("flops"), int) and isinstance(o.get("hbm_bytes"), int)
                and isinstance(o.get("sources"), list) and all(
                    isinstance(s, list) and len(s) == 3 and all(isinstance(f, str) for f in s) for s in o["sources"])
                for o in v.values())
        for key, check in checks.items():
            if key not in header or not check(header[key]):
                raise _malformed("header", f"missing or bad {key!r}")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError) as e:
        raise _malformed("header", f"not a JSON object ({e})") from None
    return header


class _Reader:
    """Reads fixed-size records from one section, raising NeffError when it runs short."""

    def __init__(self, body: bytes, section: str):
        self.body, self.section, self.position = body, section, 0

    def read(self, record: struct.Struct, what: str) -> tuple:
        if self.position + record.size > len(self.body):
            raise _malformed(self.section, f"ends inside {what} at byte {self.position}")
        values = record.unpack_from(self.body, self.position)
        self.position += record.size
        return values

    def read_bytes(self, size: int, what: str) -> bytes:
        if self.position + size > len(self.body):
            raise _malformed(self.section, f"ends inside {what} at byte {self.position}")
        self.position += size
        return self.body[self.position - size:self.position]

    def finish(self) -> None:
        if self.position != len(self.body):
            raise _malformed(self.section, f"{len(self.body) - self.position} stray bytes at its end")


def _decode_strings(body: bytes) -> list[str]:
    """The strings section; a malformed one is read again field by field, which names the problem."""
    strings = _strings_fast(body)
    if strings is not None:
        return strings
    reader = _Reader(body, "strings")
    (count,) = reader.read(_U32, "the string count")
    strings = []
    for i in range(count):
        (size,) = reader.read(_U32, f"string {i}")
        try:
            strings.append(reader.read_bytes(size, f"string {i}").decode())
        except UnicodeDecodeError:
            raise _malformed("strings", f"string {i} is not UTF-8") from None
    reader.finish()
    return strings


def _decode_origins(entries: dict[str, Any]) -> dict[str, Origin]:
    return {name: Origin(tuple(Source(*s) for s in e["sources"]), e["flops"], e["hbm_bytes"])
            for name, e in entries.items()}


def _decode_instructions(body: bytes, tensors: list[str], strings: list[str], version: int) -> list[Instruction]:
    """The instruction section: decoded by ``_decode_fast``; a section it finds malformed is decoded again
    field by field, which names the problem precisely."""
    try:
        return _decode_fast(body, tensors, strings, version)
    except (_Malformed, struct.error, IndexError, KeyError):
        pass
    reader = _Reader(body, "instructions")
    (count,) = reader.read(_U32, "the instruction count")
    instructions = [_decode_instruction(reader, i, tensors, strings, version) for i in range(count)]
    reader.finish()
    return instructions


def _decode_instruction(reader: _Reader, number: int, tensors: list[str], strings: list[str],
                        version: int) -> Instruction:
    what = f"instruction {number}"

    def check(ok: bool, problem: str) -> None:
        if not ok:
            raise _malformed("instructions", f"{what}: {problem}")

    def string(index: int) -> str:
        check(index < len(strings), f"string index {index} out of range")
        return strings[index]

    code, engine, operand_count = reader.read(_INSTR_HEAD, what)
    check(code in OPCODE_BY_CODE, f"unknown opcode code {code}")
    check(engine < len(ENGINES), f"unknown engine id {engine}")
    spec = OPCODE_BY_CODE[code]
    instr = Instruction(ENGINES[engine], spec.name)
    for _ in range(operand_count):
        (index,) = reader.read(_OPERAND_INDEX, what)
        check(index < len(spec.operands), f"{spec.name} has no operand #{index}")
        name = spec.operands[index].name
        check(name not in instr.operands, f"operand {name!r} given twice")
        memory, dtype, pair_count, start, partitions, offset, pstride, tensor = reader.read(_PATTERN_HEAD, what)
        check(memory < len(MEMORIES), f"unknown memory id {memory}")
        check(dtype in DTYPE_BY_CODE, f"unknown dtype code {dtype}")
        check(-1 <= tensor < len(tensors), f"tensor index {tensor} out of range")
        pattern = tuple(reader.read(_PAIR, what) for _ in range(pair_count))
        instr.operands[name] = AccessPattern(MEMORIES[memory], DTYPE_BY_CODE[dtype].name, offset, pattern,
                                             start, partitions, tensors[tensor] if tensor >= 0 else None,
                                             pstride)
    (attr_count,) = reader.read(_ATTR_COUNT, what)
    check(attr_count <= len(spec.attrs), f"{spec.name} has {len(spec.attrs)} attributes, not {attr_count}")
    for attr in spec.attrs[:attr_count]:
        if attr.kind is not str:
            (instr.attrs[attr.name],) = reader.read(_ATTR_STRUCTS[attr.kind], what)
        elif attr.choices:
            (index,) = reader.read(_CHOICE, what)
            check(index < len(attr.choices), f"{attr.name} choice {index} out of range")
            instr.attrs[attr.name] = attr.choices[index]
        else:
            instr.attrs[attr.name] = string(reader.read(_STRING, what)[0])
    for attr in spec.attrs[attr_count:]:  # added to the table after the file was written
        check(attr.default is not None, f"required attribute {attr.name!r} is missing")
        instr.attrs[attr.name] = attr.default
    instr.comment = string(reader.read(_U32, what)[0])
    if version >= 3:
        instr.origin = string(reader.read(_U32, what)[0])
    (wait_count,) = reader.read(_U16, what)
    instr.waits = [reader.read(_WAIT, what) for _ in range(wait_count)]
    (signal_count,) = reader.read(_U16, what)
    instr.signals = [reader.read(_U32, what)[0] for _ in range(signal_count)]
    return instr


def _decode_constants(body: bytes, entries: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    constants = {}
    for entry in entries:
        try:
            name, dtype, shape = entry["name"], DTYPES[entry["dtype"]].numpy, tuple(entry["shape"])
            offset, nbytes = entry["offset"], entry["nbytes"]
            if nbytes != prod(shape) * dtype.itemsize or offset < 0 or offset + nbytes > len(body):
                raise _malformed("constants", f"{name!r}: {nbytes} bytes at {offset} do not hold "
                                              f"{entry['dtype']}{list(shape)} within {len(body)} bytes")
            array = np.frombuffer(body, dtype, prod(shape), offset).reshape(shape).copy()
        except (KeyError, TypeError, ValueError) as e:
            raise _malformed("header", f"bad constant entry {entry} ({e})") from None
        constants[name] = array
    return constants
