"""The record layouts of a .neff's instruction section (isa/neff.py has the container), its fast decoder and its
fast encoder."""

from __future__ import annotations

import struct
from typing import Any

from isa.dtypes import DTYPE_BY_CODE, DTYPES
from isa.instructions import OPCODE_BY_CODE, OPCODES
from isa.program import ENGINES, MEMORIES, AccessPattern, Instruction

_U16, _U32 = struct.Struct("<H"), struct.Struct("<I")
_INSTR_HEAD = struct.Struct("<HBB")
_OPERAND_INDEX = _ATTR_COUNT = struct.Struct("<B")
_PATTERN_HEAD = struct.Struct("<BBBxiiqqi")
_PAIR = struct.Struct("<qq")
_PAIR_COUNT = struct.Struct("<B")  # the third byte of _PATTERN_HEAD
_WAIT = struct.Struct("<II")
_ATTR_STRUCTS = {int: struct.Struct("<q"), float: struct.Struct("<d")}
_CHOICE, _STRING = _U16, _U32
_COMMENT_ORIGIN = struct.Struct("<II")


class _Malformed(Exception):
    """The fast decoder met a malformed section (the careful one then says where and why)."""


_PLANS: dict[int, tuple[tuple[str, ...], tuple[tuple[str, Any, Any, Any], ...]]] = {}


def _plan(code: int) -> tuple[tuple[str, ...], tuple[tuple[str, Any, Any, Any], ...]]:
    """Per opcode code: its operand names, and per attribute (name, struct or None, choices, default)."""
    plan = _PLANS.get(code)
    if plan is None:
        spec = OPCODE_BY_CODE[code]
        attrs = tuple((a.name, _ATTR_STRUCTS.get(a.kind), a.choices if a.kind is str else None, a.default)
                      for a in spec.attrs)
        plan = _PLANS[code] = (tuple(o.name for o in spec.operands), attrs)
    return plan


def _decode_fast(body: bytes, tensors: list[str], strings: list[str], version: int) -> list[Instruction]:
    """The instruction section with the checks of ``_decode_instruction``, without its per-field reader
    (GPT-2's 36,000 instructions: 0.8 s -> 0.3 s). An access pattern is decoded once per distinct
    encoding and shared by the instructions that use it (it is a frozen value)."""
    head, pattern_head, pair, wait = (_INSTR_HEAD.unpack_from, _PATTERN_HEAD.unpack_from, _PAIR.unpack_from,
                                      _WAIT.unpack_from)
    u16, u32 = _U16.unpack_from, _U32.unpack_from
    size, n_strings, n_tensors, n_memories = len(body), len(strings), len(tensors), len(MEMORIES)
    patterns: dict[bytes, AccessPattern] = {}
    (count,) = u32(body, 0)
    pos, out = 4, []
    for _ in range(count):
        code, engine, operand_count = head(body, pos)
        pos += _INSTR_HEAD.size
        names, attrs = _plan(code)
        instr = Instruction(ENGINES[engine], OPCODE_BY_CODE[code].name)
        operands = instr.operands
        for _ in range(operand_count):
            name = names[body[pos]]
            if name in operands:
                raise _Malformed
            (pair_count,) = _PAIR_COUNT.unpack_from(body, pos + 3)
            end = pos + 1 + _PATTERN_HEAD.size + _PAIR.size * pair_count
            if end > size:
                raise _Malformed
            raw = body[pos + 1:end]
            ap = patterns.get(raw)
            if ap is None:
                memory, dtype, _, start, partitions, offset, pstride, tensor = pattern_head(raw, 0)
                if memory >= n_memories or dtype not in DTYPE_BY_CODE or not -1 <= tensor < n_tensors:
                    raise _Malformed
                pattern = tuple(pair(raw, _PATTERN_HEAD.size + _PAIR.size * i) for i in range(pair_count))
                ap = patterns[raw] = AccessPattern(MEMORIES[memory], DTYPE_BY_CODE[dtype].name, offset, pattern,
                                                   start, partitions, tensors[tensor] if tensor >= 0 else None,
                                                   pstride)
            operands[name] = ap
            pos = end
        attr_count = body[pos]
        pos += 1
        if attr_count > len(attrs):
            raise _Malformed
        values = instr.attrs
        for name, record, choices, _ in attrs[:attr_count]:
            if record is not None:
                (values[name],) = record.unpack_from(body, pos)
                pos += record.size
            elif choices:
                (index,) = u16(body, pos)
                pos += 2
                values[name] = choices[index]
            else:
                (index,) = u32(body, pos)
                pos += 4
                if index >= n_strings:
                    raise _Malformed
                values[name] = strings[index]
        for name, _, _, default in attrs[attr_count:]:
            if default is None:
                raise _Malformed
            values[name] = default
        (comment,) = u32(body, pos)
        pos += 4
        if version >= 3:
            (origin,) = u32(body, pos)
            pos += 4
            instr.origin = strings[origin]
        instr.comment = strings[comment]
        (wait_count,) = u16(body, pos)
        pos += 2
        instr.waits = [wait(body, pos + 8 * i) for i in range(wait_count)]
        pos += 8 * wait_count
        (signal_count,) = u16(body, pos)
        pos += 2
        instr.signals = [u32(body, pos + 4 * i)[0] for i in range(signal_count)]
        pos += 4 * signal_count
        out.append(instr)
    if pos != size:
        raise _Malformed
    return out


# ------------------------------------------------------------------------------------------ encode

_KIND_PLAIN, _KIND_CHOICE, _KIND_STRING = 0, 1, 2
_ENGINE_INDEX = {name: i for i, name in enumerate(ENGINES)}
_MEMORY_INDEX = {name: i for i, name in enumerate(MEMORIES)}


class _EncodePlan:
    """Per opcode: what ``FastEncoder`` needs to write its instructions without looking the table up again."""

    __slots__ = ("code", "known", "operands", "attr_count", "attrs", "attr_struct")

    def __init__(self, opcode: str) -> None:
        spec = OPCODES[opcode]
        self.code = spec.code
        self.known = frozenset((*(o.name for o in spec.operands), *(a.name for a in spec.attrs)))
        self.operands = tuple((o.name, _OPERAND_INDEX.pack(i)) for i, o in enumerate(spec.operands))
        self.attr_count = _ATTR_COUNT.pack(len(spec.attrs))
        attrs, layout = [], "<"
        for a in spec.attrs:
            if a.kind is int or a.kind is float:
                attrs.append((a.name, a.default, _KIND_PLAIN, None))
                layout += "q" if a.kind is int else "d"
            elif a.choices:
                attrs.append((a.name, a.default, _KIND_CHOICE, {c: i for i, c in enumerate(a.choices)}))
                layout += "H"
            else:
                attrs.append((a.name, a.default, _KIND_STRING, None))
                layout += "I"
        self.attrs = tuple(attrs)
        self.attr_struct = struct.Struct(layout)


class FastEncoder:
    """Writes instructions the way ``isa.neff._encode_instruction`` does, byte for byte, with the opcode table
    looked up once per opcode and each distinct access pattern encoded once (Llama's 127,800 instructions:
    ~2.5 s -> ~0.6 s). It raises on anything unusual; the caller then encodes that instruction with the careful
    encoder, which names the problem (or accepts what it accepts)."""

    def __init__(self, tensor_index: dict[str, int], add_string) -> None:
        self.tensor_index = tensor_index
        self.add_string = add_string
        self.plans: dict[str, _EncodePlan] = {}
        # by object: the instructions (alive while encoding) share pattern objects, and an id costs no
        # Python-level __hash__/__eq__ call
        self.patterns: dict[int, bytes] = {}

    def pattern(self, ap: AccessPattern) -> bytes:
        raw = self.patterns.get(id(ap))
        if raw is None:
            if ap.dtype not in DTYPES:
                raise ValueError(ap.dtype)
            tensor = -1 if ap.tensor is None else self.tensor_index[ap.tensor]
            raw = _PATTERN_HEAD.pack(_MEMORY_INDEX[ap.memory], DTYPES[ap.dtype].code, len(ap.pattern),
                                     ap.start_partition, ap.partitions, ap.offset, ap.partition_stride, tensor)
            raw += b"".join([_PAIR.pack(stride, count) for stride, count in ap.pattern])
            self.patterns[id(ap)] = raw
        return raw

    def encode(self, instr: Instruction, out: bytearray) -> None:
        """Append ``instr``'s record to ``out`` (raises, possibly after appending part of it)."""
        plan = self.plans.get(instr.opcode)
        if plan is None:
            plan = self.plans[instr.opcode] = _EncodePlan(instr.opcode)
        operands, attrs = instr.operands, instr.attrs
        if not (plan.known.issuperset(operands) and plan.known.issuperset(attrs)):
            raise KeyError(instr.opcode)
        out += _INSTR_HEAD.pack(plan.code, _ENGINE_INDEX[instr.engine], len(operands))
        for name, index in plan.operands:
            ap = operands.get(name)
            if ap is not None:
                out += index
                out += self.pattern(ap)
        out += plan.attr_count
        values = []
        get, add = attrs.get, self.add_string
        for name, default, kind, choices in plan.attrs:
            value = get(name, default)
            if kind == _KIND_PLAIN:
                values.append(value)
            elif kind == _KIND_CHOICE:
                values.append(choices[value])
            else:
                values.append(add(value))
        out += plan.attr_struct.pack(*values)
        out += _COMMENT_ORIGIN.pack(add(instr.comment), add(instr.origin))
        waits, signals = instr.waits, instr.signals
        out += _U16.pack(len(waits))
        for sem, value in waits:
            out += _WAIT.pack(sem, value)
        out += _U16.pack(len(signals))
        for sem in signals:
            out += _U32.pack(sem)
