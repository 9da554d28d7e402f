"""The record layouts of a .neff's instruction section (isa/neff.py has the container), its fast decoder and its
fast encoder."""

from __future__ import annotations

import struct

from isa.dtypes import DTYPE_BY_CODE, DTYPES
from isa.instructions import OPCODE_BY_CODE, OPCODES
from isa.program import ENGINES, MEMORIES, AccessPattern, Instruction

_U16, _U32 = struct.Struct("<H"), struct.Struct("<I")
_INSTR_HEAD = struct.Struct("<HBB")
_OPERAND_INDEX = _ATTR_COUNT = struct.Struct("<B")
_PATTERN_HEAD = struct.Struct("<BBBxiiqqi")
_PAIR = struct.Struct("<qq")
_PAIR_COUNT = struct.Struct("<B")  # the third byte of _PATTERN_HEAD
_OPERAND_HEAD = 1 + _PATTERN_HEAD.size  # an operand: its index among the opcode's operands, then its pattern head
_WAIT = struct.Struct("<II")
_ATTR_STRUCTS = {int: struct.Struct("<q"), float: struct.Struct("<d")}
_CHOICE, _STRING = _U16, _U32
_COMMENT_ORIGIN = struct.Struct("<II")
_TAIL = struct.Struct("<IIH")  # comment, origin, wait count


class _Malformed(Exception):
    """The fast decoder met a malformed section (the careful one then says where and why)."""


class _DecodePlan:
    """Per opcode code, what ``_decode_fast`` needs: the opcode and operand names, and per attribute (name,
    struct or None, choices, default); ``plain`` unpacks all attributes at once when every one is an int or a
    float (a dma's queue)."""

    __slots__ = ("opcode", "names", "attrs", "plain", "attr_names", "attr_count")

    def __init__(self, code: int) -> None:
        spec = OPCODE_BY_CODE[code]
        self.opcode = spec.name
        self.names = tuple(o.name for o in spec.operands)
        self.attrs = tuple((a.name, _ATTR_STRUCTS.get(a.kind), a.choices if a.kind is str else None, a.default)
                           for a in spec.attrs)
        self.attr_names = tuple(a.name for a in spec.attrs)
        self.attr_count = len(spec.attrs)
        plain = all(a.kind is int or a.kind is float for a in spec.attrs)
        self.plain = struct.Struct("<" + "".join("q" if a.kind is int else "d" for a in spec.attrs)) if plain else None


_PLANS: dict[int, _DecodePlan] = {}
_PATTERN_STRUCTS: dict[int, struct.Struct] = {}  # pair count -> that many (stride, count) pairs
_new = object.__new__


def _pattern_struct(pairs: int) -> struct.Struct:
    record = _PATTERN_STRUCTS.get(pairs)
    if record is None:
        record = _PATTERN_STRUCTS[pairs] = struct.Struct("<" + "qq" * pairs)
    return record


def _decode_fast(body: bytes, tensors: list[str], strings: list[str], version: int) -> list[Instruction]:
    """The instruction section with the checks of ``_decode_instruction``, without its per-field reader
    (GPT-2's 37,000 instructions: 0.8 s -> 0.15 s). An access pattern is decoded once per distinct
    encoding and shared by the instructions that use it (it is a frozen value, built here without its
    dataclass constructor's eight ``object.__setattr__`` calls); so is each distinct (stride, count) tuple."""
    head, wait, tail = _INSTR_HEAD.unpack_from, _WAIT.unpack_from, _TAIL.unpack_from
    pattern_head = _PATTERN_HEAD.unpack_from
    u16, u32 = _U16.unpack_from, _U32.unpack_from
    size, n_strings, n_tensors, n_memories = len(body), len(strings), len(tensors), len(MEMORIES)
    dtypes = {code: d.name for code, d in DTYPE_BY_CODE.items()}
    patterns: dict[bytes, AccessPattern] = {}
    pair_tuples: dict[bytes, tuple[tuple[int, int], ...]] = {}
    plans = _PLANS
    (count,) = u32(body, 0)
    pos, out = 4, []
    append = out.append
    for _ in range(count):
        code, engine, operand_count = head(body, pos)
        pos += _INSTR_HEAD.size
        plan = plans.get(code)
        if plan is None:
            plan = plans[code] = _DecodePlan(code)  # KeyError: an unknown code
        names = plan.names
        operands = {}
        for _ in range(operand_count):
            name = names[body[pos]]
            end = pos + _OPERAND_HEAD + _PAIR.size * body[pos + 3]  # the operand index, the pattern head, its pairs
            if end > size:
                raise _Malformed
            raw = body[pos + 1:end]
            ap = patterns.get(raw)
            if ap is None:
                memory, dtype, _, start, partitions, offset, pstride, tensor = pattern_head(raw)
                if memory >= n_memories or dtype not in dtypes or not -1 <= tensor < n_tensors:
                    raise _Malformed
                key = raw[_PATTERN_HEAD.size:]
                pattern = pair_tuples.get(key)
                if pattern is None:
                    pairs = _pattern_struct(body[pos + 3]).unpack_from(key)
                    pattern = pair_tuples[key] = tuple(zip(pairs[::2], pairs[1::2]))
                ap = patterns[raw] = _new(AccessPattern)
                fields = ap.__dict__  # in the dataclass's field order
                fields["memory"] = MEMORIES[memory]
                fields["dtype"] = dtypes[dtype]
                fields["offset"] = offset
                fields["pattern"] = pattern
                fields["start_partition"] = start
                fields["partitions"] = partitions
                fields["tensor"] = tensors[tensor] if tensor >= 0 else None
                fields["partition_stride"] = pstride
            operands[name] = ap
            pos = end
        if len(operands) != operand_count:  # an operand given twice
            raise _Malformed
        attr_count = body[pos]
        pos += 1
        plain = plan.plain
        if plain is not None and attr_count == plan.attr_count:  # every attribute a number: one unpack
            if attr_count == 1:  # a dma's queue
                attrs = {plan.attr_names[0]: plain.unpack_from(body, pos)[0]}
            else:
                attrs = {}
                for name, value in zip(plan.attr_names, plain.unpack_from(body, pos)):
                    attrs[name] = value
            pos += plain.size
        else:
            if attr_count > len(plan.attrs):
                raise _Malformed
            attrs = {}
            for name, record, choices, _ in plan.attrs[:attr_count]:
                if record is not None:
                    (attrs[name],) = record.unpack_from(body, pos)
                    pos += record.size
                elif choices:
                    (index,) = u16(body, pos)
                    pos += 2
                    attrs[name] = choices[index]
                else:
                    (index,) = u32(body, pos)
                    pos += 4
                    if index >= n_strings:
                        raise _Malformed
                    attrs[name] = strings[index]
            for name, _, _, default in plan.attrs[attr_count:]:
                if default is None:
                    raise _Malformed
                attrs[name] = default
        if version >= 3:
            comment, origin, wait_count = tail(body, pos)
            origin_text = strings[origin]
            pos += 10
        else:
            (comment,) = u32(body, pos)
            (wait_count,) = u16(body, pos + 4)
            origin_text = ""
            pos += 6
        if wait_count:
            waits = [wait(body, pos + 8 * i) for i in range(wait_count)]
            pos += 8 * wait_count
        else:
            waits = []
        (signal_count,) = u16(body, pos)
        pos += 2
        if signal_count:
            signals = [u32(body, pos + 4 * i)[0] for i in range(signal_count)]
            pos += 4 * signal_count
        else:
            signals = []
        append(Instruction(ENGINES[engine], plan.opcode, operands, attrs, waits, signals, None, strings[comment],
                           origin_text))
    if pos != size:
        raise _Malformed
    return out


def _strings_fast(body: bytes) -> list[str] | None:
    """The strings section, or None when it is malformed (the careful reader then names the problem)."""
    try:
        (count,) = _U32.unpack_from(body, 0)
        u32, decode, position, strings = _U32.unpack_from, bytes.decode, 4, []
        append = strings.append
        for _ in range(count):
            (size,) = u32(body, position)
            position += 4
            append(decode(body[position:position + size]))
            position += size
    except (struct.error, UnicodeDecodeError):
        return None
    return strings if position == len(body) else None


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
