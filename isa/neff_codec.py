"""The record layouts of a .neff's instruction section (isa/neff.py has the container) and its fast decoder."""

from __future__ import annotations

import struct
from typing import Any

from isa.dtypes import DTYPE_BY_CODE
from isa.instructions import OPCODE_BY_CODE
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
