"""The ISA text form (.s): printer, assembler (lark grammar in isa/asm.lark) and the constants side file.

A program prints as a header of directives followed by one instruction per line::

    ; neuronc ISA program
    .target trn1
    .constants "prog.constants.npz"
    .tensor in0 input f32 [3,100]
    .meta useful_macs 90000
    sp.dma dst=sbuf[0:100]@0[1,3]:f32 src=hbm:in0@0[1,100][100,3]:f32 queue=0 signal(s5)
    pe.load_stationary src=sbuf[0:100]@4096[1,128]:bf16 wait(s5>=1)  ; a comment

An instruction is ``ENGINE.OPCODE``, its operands and then its attributes as ``name=value`` in the
order of the OPCODES table, then ``wait(sN>=V,...)``, ``signal(sN,...)`` and an optional
``; comment`` (``Instruction.comment``, stripped). The printer writes every attribute, defaults
included, except the ``optional`` attributes added to existing opcodes later, which it writes only
when they differ from their default; the assembler accepts any order and fills absent attributes
with their defaults. Other comments are dropped. ``print_program(parse_program(t)) == t`` for printed text ``t``.

``.inputs``/``.outputs`` are printed only when the model's input/output order differs from the order
of the ``.tensor`` declarations. Constant data lives in an ``.npz`` side file named by ``.constants``
(relative to the .s file): each array is stored under ``NAME::DTYPE``; bf16 and fp8 arrays are stored
as their raw bits (uint16/uint8) since numpy's npz cannot describe them.
"""

from __future__ import annotations

import json
import operator
import os
import re
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import NoReturn

import numpy as np
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput, UnexpectedToken

from isa.collector import paused as _gc_paused  # the parse tree: millions of acyclic objects
from isa.constants import (
    CONSTANTS_KEY_SEP,
    constant_problems,
    isa_dtype_of,
    read_constants,
    write_atomic,
    write_constants,
)
from isa.dtypes import DTYPES
from isa.errors import AsmError, ProgramError
from isa.instructions import OPCODES, AttrSpec, OpcodeSpec, OperandSpec
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

__all__ = [
    "CONSTANTS_KEY_SEP", "constant_problems", "isa_dtype_of", "load_asm_file", "parse_program",
    "print_instruction", "print_origin", "print_pattern", "print_program", "read_constants", "save_asm_file",
    "write_atomic", "write_constants",
]

HEADER_COMMENT = "; neuronc ISA program"
MAX_FREE_PAIRS = 4  # machine-model.md: "up to 4 [stride, count] pairs"

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TENSOR_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INT_RE = re.compile(r"[+-]?\d+")
_SEMAPHORE_RE = re.compile(r"s(\d+)")
_ORIGIN_SEP = "|"  # between the module, op and location of an origin's source= string
_WORD_RE = re.compile(r"[.\w+-]*")  # the offending word quoted in a syntax error
_TERMINAL_NAMES = {
    "NAME": "a name", "TNAME": "a tensor name", "NUMBER": "a number", "STRING": "a quoted string",
    "COMMENT": "a comment", "_NL": "end of line", "$END": "end of input",
}


# ----------------------------------------------------------------------------------------- printer

def print_program(program: Program) -> str:
    """The text form of ``program`` (ends with a newline). Raises ProgramError for what text cannot say."""
    lines = [HEADER_COMMENT, f".target {_name_or_string(program.target)}"]
    if program.constants_file is not None:
        lines.append(f".constants {json.dumps(program.constants_file)}")
    for decl in program.tensors.values():
        dims = ",".join(str(d) for d in decl.shape)
        lines.append(f".tensor {_tensor_name(decl.name)} {decl.kind} {decl.dtype} [{dims}]")
    for directive, kind, names in ((".inputs", "input", program.inputs),
                                   (".outputs", "output", program.outputs)):
        declared = [name for name, decl in program.tensors.items() if decl.kind == kind]
        if list(names) != declared:
            if sorted(names) != sorted(declared):
                raise ProgramError(f"program {directive[1:]} {list(names)} are not the declared {kind} "
                                   f"tensors {declared}")
            lines.append(" ".join([directive, *names]))
    for key, value in program.meta.items():
        if not _NAME_RE.fullmatch(key):
            raise ProgramError(f"meta key {key!r} is not a name")
        lines.append(f".meta {key} {_meta_value(key, value)}")
    lines.extend(print_origin(name, origin) for name, origin in program.origins.items())
    lines.extend(print_instruction(instr) for instr in program.instructions)
    return "\n".join(lines) + "\n"


def print_instruction(instr: Instruction) -> str:
    """One instruction as a line of text (no newline)."""
    spec = OPCODES.get(instr.opcode)
    if spec is None:
        raise ProgramError(f"unknown opcode {instr.opcode!r}")
    where = f"{instr.engine}.{instr.opcode}"
    known = {s.name for s in spec.operands} | {a.name for a in spec.attrs}
    for name in [*instr.operands, *instr.attrs]:
        if name not in known:
            raise ProgramError(f"{where} has no operand or attribute {name!r}")
    parts = [f"{instr.label}: {where}" if instr.label else where]
    if instr.label and not _NAME_RE.fullmatch(instr.label):
        raise ProgramError(f"{where}: label {instr.label!r} is not a name")
    for operand in spec.operands:
        if operand.name in instr.operands:
            parts.append(f"{operand.name}={print_pattern(instr.operands[operand.name])}")
    for attr in spec.attrs:
        value = instr.attrs.get(attr.name, attr.default)
        if value is None:
            raise ProgramError(f"{where}: missing attribute {attr.name!r}")
        text = _attr_text(where, attr, value)
        if not (attr.optional and text == _attr_text(where, attr, attr.default)):
            parts.append(f"{attr.name}={text}")
    if instr.waits:
        parts.append("wait(" + ",".join(f"s{sem}>={value}" for sem, value in instr.waits) + ")")
    if instr.signals:
        parts.append("signal(" + ",".join(f"s{sem}" for sem in instr.signals) + ")")
    if instr.origin:
        parts.append(f"origin={json.dumps(instr.origin)}")
    text = " ".join(parts)
    if instr.comment:
        if "\n" in instr.comment or "\r" in instr.comment:
            raise ProgramError(f"{where}: comment {instr.comment!r} spans several lines")
        text += f"  ; {instr.comment}"
    return text


def print_origin(name: str, origin: Origin) -> str:
    """``.origin "NAME" flops=F hbm_bytes=B source="MODULE|OP|FILE:LINE"...`` (one source= per source)."""
    parts = [f".origin {json.dumps(name)}", f"flops={operator.index(origin.flops)}",
             f"hbm_bytes={operator.index(origin.hbm_bytes)}"]
    for source in origin.sources:
        if any(_ORIGIN_SEP in field or "\n" in field for field in (source.module, source.op)):
            raise ProgramError(f"origin {name!r}: module {source.module!r} or op {source.op!r} contains "
                               f"{_ORIGIN_SEP!r} or a newline")
        parts.append("source=" + json.dumps(_ORIGIN_SEP.join((source.module, source.op, source.location))))
    return " ".join(parts)


def print_pattern(ap: AccessPattern) -> str:
    """``sbuf[P0:P1]@OFF[S,C]...:DT`` or ``hbm:NAME@OFF[PS,PC][S,C]...:DT``."""
    pairs = "".join(f"[{stride},{count}]" for stride, count in ap.pattern)
    if ap.memory == "hbm":
        if ap.tensor is None or ap.start_partition != 0:
            raise ProgramError(f"hbm access pattern needs a tensor and start partition 0: {ap}")
        return f"hbm:{_tensor_name(ap.tensor)}@{ap.offset}[{ap.partition_stride},{ap.partitions}]{pairs}:{ap.dtype}"
    if ap.tensor is not None or ap.partition_stride != 0:
        raise ProgramError(f"{ap.memory} access pattern cannot have a tensor or partition stride: {ap}")
    stop = ap.start_partition + ap.partitions
    return f"{ap.memory}[{ap.start_partition}:{stop}]@{ap.offset}{pairs}:{ap.dtype}"


def _attr_text(where: str, attr: AttrSpec, value: object) -> str:
    try:
        if attr.kind is int:
            return str(operator.index(value))
        if attr.kind is float:
            return repr(float(value))  # shortest round-trip form
    except (TypeError, ValueError):
        raise ProgramError(f"{where}: attribute {attr.name}={value!r} is not {attr.kind.__name__}") from None
    if not isinstance(value, str):
        raise ProgramError(f"{where}: attribute {attr.name}={value!r} is not str")
    return value if attr.choices else json.dumps(value)


def _meta_value(key: str, value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float | np.floating):
        return repr(float(value))
    try:
        return str(operator.index(value))
    except TypeError:
        raise ProgramError(f"meta {key}={value!r} is not int, float or str") from None


def _name_or_string(text: str) -> str:
    return text if _NAME_RE.fullmatch(text) else json.dumps(text)


def _tensor_name(name: str) -> str:
    if not _TENSOR_NAME_RE.fullmatch(name):
        raise ProgramError(f"tensor name {name!r} is not a name (letters, digits, '_' and '.')")
    return name


# --------------------------------------------------------------------------------------- assembler

@cache
def _parser() -> Lark:
    grammar = resources.files("isa").joinpath("asm.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=True)


def parse_program(text: str, source: str | None = None,
                  constants: Mapping[str, np.ndarray] | None = None) -> Program:
    """Assemble ISA text into a Program; ``source`` names the file in error messages.

    ``constants`` (const tensor name -> array) becomes ``Program.constants``: each array must match
    its tensor's declared dtype and shape, and every const tensor needs one. Raises AsmError
    ("LINE:COL: message") naming the offending token.
    """
    return _Assembler(source, constants, None).run(text)


def load_asm_file(path: str | os.PathLike) -> Program:
    """Read a .s file and the constants side file its ``.constants`` directive names."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise AsmError(f"cannot read {str(path)!r}: {e.strerror}") from None
    return _Assembler(str(path), None, lambda name: read_constants(path.parent / name)).run(text)


def save_asm_file(program: Program, path: str | os.PathLike) -> None:
    """Write ``program`` as text to ``path`` and its constants to ``<stem>.constants.npz`` beside it."""
    path = Path(path)
    side = path.with_name(path.stem + ".constants.npz") if program.constants else None
    text = print_program(replace(program, constants_file=side.name if side else None))
    if side is not None:
        write_constants(program, side)
    write_atomic(path, text.encode())


class _Assembler:
    """Walks the parse tree of one program, checking every statement against the tables."""

    def __init__(self, source: str | None, constants: Mapping[str, np.ndarray] | None,
                 load_constants: Callable[[str], Mapping[str, np.ndarray]] | None):
        self.source = source
        self.constants = constants
        self.load_constants = load_constants
        self.target: str | None = None
        self.constants_file: str | None = None
        self.constants_token: Token | None = None
        self.tensors: dict[str, TensorDecl] = {}
        self.tensor_tokens: dict[str, Token] = {}
        self.order: dict[str, tuple[list[Token], Token]] = {}  # "input"/"output" -> .inputs/.outputs
        self.meta: dict[str, int | float | str] = {}
        self.origins: dict[str, Origin] = {}
        self.instructions: list[Instruction] = []
        self.labels: set[str] = set()

    def run(self, text: str) -> Program:
        with _gc_paused():
            return self._run(text)

    def _run(self, text: str) -> Program:
        try:
            tree = _parser().parse(text)
        except UnexpectedInput as e:
            raise self._syntax_error(e, text) from None
        for line in tree.children:
            statement = next((c for c in line.children if isinstance(c, Tree)), None)
            if statement is not None:
                comment = next((c for c in line.children if isinstance(c, Token)), None)
                if statement.data == "instruction":
                    self._instruction(statement, comment)
                else:
                    getattr(self, "_" + statement.data)(statement)
        if self.target is None:
            self._fail("missing .target directive", None)
        inputs, outputs = self._io_order("input"), self._io_order("output")
        return Program(self.target, self.tensors, self.instructions, self._checked_constants(),
                       inputs, outputs, self.meta, self.origins, constants_file=self.constants_file)

    # -- errors
    def _error(self, message: str, where: Token | Tree | None) -> AsmError:
        """AsmError at ``where`` (a token, or a tree's first token), prefixed with the source name."""
        while isinstance(where, Tree):
            where = where.children[0]
        line, column = (where.line, where.column) if where is not None else (None, None)
        error = AsmError(message, line, column)
        if self.source is not None:
            error.args = (f"{self.source}:{error.args[0]}",)
        return error

    def _fail(self, message: str, where: Token | Tree | None) -> NoReturn:
        raise self._error(message, where)

    def _syntax_error(self, e: UnexpectedInput, text: str) -> AsmError:
        if isinstance(e, UnexpectedToken) and e.token.type in ("_NL", "$END"):
            found = _TERMINAL_NAMES[e.token.type]
        else:
            position = e.token.start_pos if isinstance(e, UnexpectedToken) else e.pos_in_stream
            found = repr(_WORD_RE.match(text, position).group() or text[position])
        expected = e.accepts or e.expected if isinstance(e, UnexpectedToken) else e.allowed
        described = sorted({_describe_terminal(name) for name in expected or ()})
        return self._error(f"syntax error at {found}; expected {' or '.join(described)}",
                           Token("", "", line=e.line, column=e.column))

    # -- directives
    def _target_dir(self, tree: Tree) -> None:
        token = tree.children[0]
        if self.target is not None:
            self._fail("duplicate .target directive", token)
        self.target = self._string(token) if token.type == "STRING" else str(token)

    def _constants_dir(self, tree: Tree) -> None:
        token = tree.children[0]
        if self.constants_file is not None:
            self._fail("duplicate .constants directive", token)
        self.constants_file, self.constants_token = self._string(token), token
        if self.load_constants is not None and self.constants is None:
            try:
                self.constants = self.load_constants(self.constants_file)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                self._fail(f"cannot read constants file {self.constants_file!r}: {reason}", token)

    def _tensor_dir(self, tree: Tree) -> None:
        name_tok, kind_tok, dtype_tok, shape = tree.children
        name = str(name_tok)
        if name in self.tensors:
            self._fail(f"duplicate tensor {name!r} (first declared on line "
                       f"{self.tensor_tokens[name].line})", name_tok)
        if kind_tok not in TENSOR_KINDS:
            self._fail(f"unknown tensor kind {str(kind_tok)!r}; kinds: {', '.join(TENSOR_KINDS)}", kind_tok)
        dims = tuple(self._int(d, "dimension", 0, pattern=False) for d in shape.children if d is not None)
        self.tensors[name] = TensorDecl(name, str(kind_tok), self._dtype(dtype_tok), dims)
        self.tensor_tokens[name] = name_tok

    def _meta_dir(self, tree: Tree) -> None:
        key, value = tree.children
        if key in self.meta:
            self._fail(f"duplicate .meta key {str(key)!r}", key)
        if value.type == "STRING":
            self.meta[str(key)] = self._string(value)
        elif value.type == "NUMBER" and _INT_RE.fullmatch(value):
            self.meta[str(key)] = int(value)
        elif value.type == "NUMBER" or value in ("inf", "nan"):
            self.meta[str(key)] = float(value)
        else:
            self._fail(f"meta value must be a number or a quoted string, got {str(value)!r}", value)

    def _origin_dir(self, tree: Tree) -> None:
        name_tok, *fields = tree.children
        name = self._string(name_tok)
        if name in self.origins:
            self._fail(f"duplicate .origin {name!r}", name_tok)
        counts, sources = {"flops": 0, "hbm_bytes": 0}, []
        seen: set[str] = set()
        for key, value in (f.children for f in fields):
            if key == "source":
                if value.type != "STRING":
                    self._fail(f".origin source expects a quoted \"MODULE|OP|FILE:LINE\", got {str(value)!r}", value)
                parts = self._string(value).split(_ORIGIN_SEP, 2)
                if len(parts) != 3:
                    self._fail(f".origin source {str(value)} is not \"MODULE|OP|FILE:LINE\"", value)
                sources.append(Source(*parts))
            elif key in counts:
                if key in seen:
                    self._fail(f"duplicate {str(key)!r} in .origin {name!r}", key)
                seen.add(str(key))
                counts[str(key)] = self._int(value, str(key), 0, pattern=False)
            else:
                self._fail(f".origin has no field {str(key)!r} (fields: flops, hbm_bytes, source)", key)
        self.origins[name] = Origin(tuple(sources), counts["flops"], counts["hbm_bytes"])

    def _inputs_dir(self, tree: Tree) -> None:
        self._order_dir("input", tree)

    def _outputs_dir(self, tree: Tree) -> None:
        self._order_dir("output", tree)

    def _order_dir(self, kind: str, tree: Tree) -> None:
        if kind in self.order:
            self._fail(f"duplicate .{kind}s directive", tree.children[0])
        keyword, *names = tree.children
        self.order[kind] = (names, keyword)

    def _io_order(self, kind: str) -> list[str]:
        declared = [name for name, decl in self.tensors.items() if decl.kind == kind]
        if kind not in self.order:
            return declared
        tokens, keyword = self.order[kind]
        for token in tokens:
            if token not in declared:
                self._fail(f".{kind}s names {str(token)!r}, which is not a declared {kind} tensor", token)
        names = [str(t) for t in tokens]
        if sorted(names) != sorted(declared):
            self._fail(f".{kind}s must list each {kind} tensor once: {', '.join(declared)}", keyword)
        return names

    def _checked_constants(self) -> dict[str, np.ndarray]:
        if self.constants is None:
            return {}
        for name, problem in constant_problems(self.tensors, self.constants):
            where = self.tensor_tokens.get(name) if name in self.tensors else self.constants_token
            self._fail(f"constant {name!r}: {problem}", where)
        for name, decl in self.tensors.items():
            if decl.kind == "const" and name not in self.constants:
                self._fail(f"no constant data for const tensor {name!r}", self.tensor_tokens[name])
        return {name: np.asarray(array) for name, array in self.constants.items()}

    # -- instructions
    def _instruction(self, tree: Tree, comment: Token | None) -> None:
        label_tok, engine_tok, opcode_tok, *items = tree.children
        if engine_tok not in ENGINES:
            self._fail(f"unknown engine {str(engine_tok)!r}; engines: {', '.join(ENGINES)}", engine_tok)
        spec = OPCODES.get(str(opcode_tok))
        if spec is None:
            self._fail(f"unknown opcode {str(opcode_tok)!r}; opcodes: {', '.join(OPCODES)}", opcode_tok)
        if engine_tok not in spec.engines:
            self._fail(f"opcode {spec.name!r} is not allowed on engine {str(engine_tok)!r} "
                       f"(allowed: {', '.join(spec.engines)})", opcode_tok)
        where = f"{engine_tok}.{spec.name}"
        operand_specs = {o.name: o for o in spec.operands}
        attr_specs = {a.name: a for a in spec.attrs}
        values: dict[str, AccessPattern | int | float | str] = {}
        instr = Instruction(str(engine_tok), spec.name, line=engine_tok.line,
                            comment=comment[1:].strip() if comment else "", label=str(label_tok or ""))
        if label_tok is not None:
            if str(label_tok) in self.labels:
                self._fail(f"label {str(label_tok)!r} is defined twice", label_tok)
            self.labels.add(str(label_tok))
        for item in items:
            if item.data == "waits":
                instr.waits.extend(self._wait(w) for w in item.children[1:] if w is not None)
            elif item.data == "signals":
                instr.signals.extend(self._semaphore(s) for s in item.children[1:] if s is not None)
            else:
                key, value = item.children
                if key == "origin" and "origin" not in operand_specs and "origin" not in attr_specs:
                    if instr.origin or not isinstance(value, Token) or value.type != "STRING":
                        self._fail(f"{where}: origin must be given once, as a quoted HLO name", key)
                    instr.origin = self._string(value)
                    continue
                if key in values:
                    self._fail(f"duplicate {str(key)!r} in {where}", key)
                if key in operand_specs:
                    values[str(key)] = self._operand(where, operand_specs[key], value)
                elif key in attr_specs:
                    values[str(key)] = self._attr(where, attr_specs[key], value)
                else:
                    self._fail(f"{where} has no operand or attribute {str(key)!r} "
                               f"({_signature(spec)})", key)
        for operand in spec.operands:
            if operand.name in values:
                instr.operands[operand.name] = values[operand.name]
            elif not operand.optional:
                self._fail(f"{where}: missing operand {operand.name!r}", opcode_tok)
        for attr in spec.attrs:
            if attr.name not in values and attr.default is None:
                self._fail(f"{where}: missing attribute {attr.name!r}", opcode_tok)
            instr.attrs[attr.name] = values.get(attr.name, attr.default)
        self.instructions.append(instr)

    def _wait(self, tree: Tree) -> tuple[int, int]:
        sem, value = tree.children
        return self._semaphore(sem), self._int(value, "semaphore value", 0, pattern=False)

    def _semaphore(self, token: Token) -> int:
        match = _SEMAPHORE_RE.fullmatch(token)
        if match is None:
            self._fail(f"semaphore must be sN (N a number), got {str(token)!r}", token)
        return int(match.group(1))

    def _attr(self, where: str, spec: AttrSpec, value: Token | Tree) -> int | float | str:
        if isinstance(value, Tree):
            self._fail(f"{where}: attribute {spec.name!r} expects {spec.kind.__name__}, "
                       "got an access pattern", value)
        if spec.kind is int:
            if value.type != "NUMBER" or not _INT_RE.fullmatch(value):
                self._fail(f"{where}: attribute {spec.name!r} expects int, got {str(value)!r}", value)
            return int(value)
        if spec.kind is float:
            if value.type != "NUMBER" and value not in ("inf", "nan"):
                self._fail(f"{where}: attribute {spec.name!r} expects float, got {str(value)!r}", value)
            return float(value)
        if value.type == "NUMBER":
            self._fail(f"{where}: attribute {spec.name!r} expects str, got {str(value)!r}", value)
        text = self._string(value) if value.type == "STRING" else str(value)
        if spec.choices and text not in spec.choices:
            self._fail(f"{where}: {spec.name}={text!r} is not one of {', '.join(spec.choices)}", value)
        return text

    def _operand(self, where: str, spec: OperandSpec, value: Token | Tree) -> AccessPattern:
        if not isinstance(value, Tree):
            self._fail(f"{where}: operand {spec.name!r} expects an access pattern, got {str(value)!r}", value)
        memory_tok = value.children[0]
        if memory_tok not in MEMORIES:
            self._fail(f"unknown memory {str(memory_tok)!r}; memories: {', '.join(MEMORIES)}", memory_tok)
        if memory_tok not in spec.memories:
            self._fail(f"{where}: operand {spec.name!r} cannot be in {memory_tok} "
                       f"(allowed: {', '.join(spec.memories)})", memory_tok)
        if value.data == "chip_pattern":
            return self._chip_pattern(value)
        return self._hbm_pattern(value)

    def _chip_pattern(self, tree: Tree) -> AccessPattern:
        memory, start_tok, stop_tok, offset, *pairs, dtype = tree.children
        if memory == "hbm":
            self._fail("malformed pattern: hbm is written hbm:TENSOR@OFFSET[PS,PC][S,C]...:DTYPE", memory)
        start = self._int(start_tok, "start partition", minimum=0)
        stop = self._int(stop_tok, "end partition", minimum=0)
        if stop <= start:
            self._fail(f"malformed pattern: empty partition range [{start}:{stop}]", stop_tok)
        return AccessPattern(str(memory), self._dtype(dtype), self._int(offset, "offset", minimum=0),
                             self._pairs(pairs), start_partition=start, partitions=stop - start)

    def _hbm_pattern(self, tree: Tree) -> AccessPattern:
        memory, name, offset, *pairs, dtype = tree.children
        if memory != "hbm":
            self._fail(f"malformed pattern: {memory} is written {memory}[P0:P1]@OFFSET[S,C]...:DTYPE", memory)
        if name not in self.tensors:
            self._fail(f"hbm tensor {str(name)!r} is not declared (declare it with .tensor before use)", name)
        if not pairs:
            self._fail("malformed pattern: hbm needs a [partition stride, partition count] pair", dtype)
        (partition_stride, partitions), *free = self._pairs(pairs, extra=1)
        return AccessPattern("hbm", self._dtype(dtype), self._int(offset, "offset", minimum=0),
                             tuple(free), partitions=partitions, tensor=str(name),
                             partition_stride=partition_stride)

    def _pairs(self, trees: list[Tree], extra: int = 0) -> tuple[tuple[int, int], ...]:
        if len(trees) > MAX_FREE_PAIRS + extra:
            self._fail(f"malformed pattern: more than {MAX_FREE_PAIRS} free [stride,count] pairs",
                       trees[MAX_FREE_PAIRS + extra])
        return tuple((self._int(s, "stride"), self._int(c, "count", minimum=1))
                     for s, c in (t.children for t in trees))

    # -- tokens
    def _int(self, token: Token, what: str, minimum: int | None = None, pattern: bool = True) -> int:
        """An integer token; ``pattern`` says it is part of an access pattern (for the message)."""
        prefix = "malformed pattern: " if pattern else ""
        if not _INT_RE.fullmatch(token):
            self._fail(f"{prefix}{what} must be an integer, got {str(token)!r}", token)
        value = int(token)
        if minimum is not None and value < minimum:
            self._fail(f"{prefix}{what} must be >= {minimum}, got {value}", token)
        return value

    def _dtype(self, token: Token) -> str:
        if token not in DTYPES:
            self._fail(f"unknown dtype {str(token)!r}; dtypes: {', '.join(DTYPES)}", token)
        return str(token)

    def _string(self, token: Token) -> str:
        try:
            return json.loads(token)
        except json.JSONDecodeError as e:
            self._fail(f"bad string literal {str(token)}: {e.msg}", token)


def _signature(spec: OpcodeSpec) -> str:
    operands = ", ".join(o.name + ("?" if o.optional else "") for o in spec.operands) or "none"
    attrs = ", ".join(a.name for a in spec.attrs) or "none"
    return f"operands: {operands}; attributes: {attrs}"


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    for terminal in _parser().terminals:
        if terminal.name == name and terminal.pattern.type == "str":
            return repr(terminal.pattern.value)
    return name
