"""HLO text -> Module: a lark LALR grammar (hlo.lark), a transformer to plain records, then a builder that
resolves names, types attribute values and reports every problem as an HloParseError at its line:column."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from hlo.errors import HloParseError
from hlo.ir import HLO_DTYPES, Computation, Instruction, Module, Quoted, Shape, SliceSpec, Window, WindowDim
from hlo.printer import format_shape
from hlo.shape_inference import same_shape

# Attributes whose bare value names a computation even without the '%' sigil.
COMPUTATION_ATTRS = frozenset({"calls", "to_apply", "condition", "body", "scatter", "select", "comparator",
                               "true_computation", "false_computation"})
DERIVED_HEADER_ATTRS = frozenset({"entry_computation_layout"})  # recomputed by the printer

# Grammar terminals in plain words, for error messages.
_WORDS = {
    "NAME": "a name", "INT": "an integer", "LAYOUT": "a layout such as {1,0}", "SCALAR": "a number",
    "STRING": "a quoted string", "BARE": "an attribute value", "FLAT_BRACED": "a {...} value", "CHUNK": "text",
    "ENTRY": "'ENTRY'",
    "ROOT": "'ROOT'", "CONSTANT": "'constant'", "PARAMETER": "'parameter'", "ARROW": "'->'",
    "ELLIPSIS": "'...'", "LPAR": "'('", "RPAR": "')'", "LBRACE": "'{'", "RBRACE": "'}'", "LSQB": "'['",
    "RSQB": "']'", "COMMA": "','", "EQUAL": "'='", "COLON": "':'", "HLOMODULE": "'HloModule'",
    "$END": "the end of the text",
}

_INT = re.compile(r"-?\d+$")
_FLOAT = re.compile(r"-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$|-?inf$|nan$")
_INT_LIST = re.compile(r"\{\s*(-?\d+(\s*,\s*-?\d+)*)?\s*\}$")
_SLICE = re.compile(r"\{\s*(\[[^\]]*\]\s*(,\s*\[[^\]]*\]\s*)*)?\}$")
_RANGE = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")
_WINDOW_ITEM = re.compile(r"([a-z_]+)=(\S*)")
_PAD_PAIR = re.compile(r"(-?\d+)_(-?\d+)$")
_METADATA_ITEM = re.compile(r'([\w.]+)\s*=\s*("(?:\\.|[^"\\])*"|[^\s}]+)')
_UNESCAPES = {"n": "\n", "t": "\t"}


@functools.cache
def _lark() -> Lark:
    grammar = (Path(__file__).with_name("hlo.lark")).read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=False)


# ---- records the transformer produces -------------------------------------------------------------------


@dataclass
class _Raw:
    """A braced attribute value, as its exact source text."""

    text: str
    token: Token


@dataclass
class _Operand:
    shape: Shape | None
    name: Token


@dataclass
class _Inst:
    name: Token
    is_root: bool
    shape: Shape
    opcode: Token
    operands: list[_Operand] = field(default_factory=list)
    literal: Any = None  # nested lists of SCALAR tokens, a SCALAR token, or ELLIPSIS token
    parameter_number: int | None = None
    attrs: list[tuple[Token, Any]] = field(default_factory=list)


@dataclass
class _Comp:
    name: Token
    is_entry: bool
    signature: tuple[list[tuple[Token, Shape]], Shape] | None
    insts: list[_Inst]


def _error(message: str, token: Token | None, source: str | None) -> HloParseError:
    line, column = (token.line, token.column) if token is not None else (None, None)
    return HloParseError(message, line, column, source)


def _name(token: Token) -> str:
    return str(token).removeprefix("%")


class _ToRecords(Transformer):
    """Parse tree -> the records above (shapes become ir.Shape right away)."""

    def __init__(self, text: str, source: str | None):
        super().__init__()
        self.text, self.source = text, source

    @v_args(inline=True)
    def start(self, header: tuple, *comps: _Comp) -> tuple:
        return header, list(comps)

    @v_args(inline=True)
    def header(self, name: Token, *attrs: tuple) -> tuple:
        return name, list(attrs)

    def computation(self, children: list) -> _Comp:
        is_entry = isinstance(children[0], Token) and children[0].type == "ENTRY"
        rest = children[1:] if is_entry else children
        signature = rest[1] if len(rest) > 1 and isinstance(rest[1], tuple) else None
        insts = [c for c in rest[1:] if isinstance(c, _Inst)]
        return _Comp(rest[0], is_entry, signature, insts)

    def signature(self, children: list) -> tuple:
        return children[:-2], children[-1]  # children[-2] is the arrow

    @v_args(inline=True)
    def param_decl(self, name: Token, shape: Shape) -> tuple:
        return name, shape

    def instruction(self, children: list) -> _Inst:
        is_root = isinstance(children[0], Token) and children[0].type == "ROOT"
        name, shape, (opcode, payload), *attrs = children[1:] if is_root else children
        inst = _Inst(name, is_root, shape, opcode, attrs=attrs)
        if opcode.type == "CONSTANT":
            inst.literal = payload
        elif opcode.type == "PARAMETER":
            inst.parameter_number = int(payload)
        else:
            inst.operands = payload
        return inst

    @v_args(inline=True)
    def constant(self, keyword: Token, literal: Any) -> tuple:
        return keyword, literal

    @v_args(inline=True)
    def parameter(self, keyword: Token, number: Token) -> tuple:
        return keyword, number

    @v_args(inline=True)
    def generic(self, opcode: Token, *operands: _Operand) -> tuple:
        return opcode, list(operands)

    def operand(self, children: list) -> _Operand:
        return _Operand(children[0] if len(children) == 2 else None, children[-1])

    @v_args(inline=True)
    def array_shape(self, dtype: Token, *rest: Token) -> Shape:
        if str(dtype) not in HLO_DTYPES:
            raise _error(f"unknown element type '{dtype}' (known: {', '.join(HLO_DTYPES)})", dtype, self.source)
        dims = tuple(int(t) for t in rest if t.type == "INT")
        layout = None
        if rest and rest[-1].type == "LAYOUT":
            layout = tuple(int(d) for d in rest[-1].strip("{}").split(",") if d)
            if sorted(layout) != list(range(len(dims))):
                raise _error(f"layout {rest[-1]} is not a permutation of the {len(dims)} dimensions of "
                             f"{dtype}{list(dims)}", rest[-1], self.source)
            if layout == tuple(reversed(range(len(dims)))):
                layout = None
        return Shape(str(dtype), dims, layout)

    def tuple_shape(self, children: list) -> Shape:
        return Shape.tuple_of(children)

    @v_args(inline=True)
    def scalar_literal(self, token: Token) -> Token:
        return token

    @v_args(inline=True)
    def elided_literal(self, token: Token) -> Token:
        return token

    def list_literal(self, children: list) -> list:
        return children

    @v_args(inline=True)
    def attribute(self, key: Token, value: Any) -> tuple:
        return key, value

    @v_args(inline=True)
    def quoted_value(self, token: Token) -> Quoted:
        return Quoted(unquote(str(token)))

    @v_args(inline=True)
    def flat_braced_value(self, token: Token) -> _Raw:
        return _Raw(str(token), token)

    @v_args(inline=True)
    def bare_value(self, token: Token) -> Token:
        return token

    def braced(self, children: list) -> _Raw:
        first, last = children[0], children[-1]
        return _Raw(self.text[first.start_pos:last.end_pos], first)


def unquote(text: str) -> str:
    """The contents of a double-quoted HLO string, escapes resolved."""
    return re.sub(r"\\(.)", lambda m: _UNESCAPES.get(m.group(1), m.group(1)), text[1:-1])


# ---- records -> IR ----------------------------------------------------------------------------------------


class _Builder:
    def __init__(self, constants: dict[str, np.ndarray] | None, source: str | None):
        self.constants, self.source = constants, source
        self.computations: dict[str, Computation] = {}
        self.owner: dict[str, str] = {}  # instruction name -> name of its computation

    def error(self, message: str, token: Token | None) -> HloParseError:
        return _error(message, token, self.source)

    def module(self, header: tuple, comps: list[_Comp]) -> Module:
        name, header_attrs = header
        entries = [c for c in comps if c.is_entry]
        if len(entries) > 1:
            raise self.error(f"second ENTRY computation %{_name(entries[1].name)}", entries[1].name)
        if not comps:
            raise self.error("the module has no computation", name)
        for comp in comps:
            cname = _name(comp.name)
            if cname in self.computations:
                raise self.error(f"duplicate computation name %{cname}", comp.name)
            self.computations[cname] = Computation(cname)
        self._check_unique_instruction_names(comps)
        entry_rec = entries[0] if entries else comps[-1]
        ordered = [c for c in comps if c is not entry_rec] + [entry_rec]
        module = Module(_name(name), [self.computation(c) for c in ordered])
        for key, value in header_attrs:
            if str(key) not in DERIVED_HEADER_ATTRS:
                module.attrs[str(key)] = self.attr_value(str(key), value)
        return module

    def _check_unique_instruction_names(self, comps: list[_Comp]) -> None:
        seen: dict[str, Token] = {}
        for comp in comps:
            for rec in comp.insts:
                name = _name(rec.name)
                if name in seen:
                    first = seen[name]
                    raise self.error(f"duplicate instruction name %{name} (first defined at line {first.line})",
                                     rec.name)
                seen[name] = rec.name
                self.owner[name] = _name(comp.name)

    def computation(self, rec: _Comp) -> Computation:
        comp = self.computations[_name(rec.name)]
        if not rec.insts:
            raise self.error(f"computation %{comp.name} has no instructions", rec.name)
        by_name: dict[str, Instruction] = {}
        for r in rec.insts:
            inst = Instruction(_name(r.name), str(r.opcode), r.shape, parameter_number=r.parameter_number)
            by_name[inst.name] = inst
            comp.add(inst)
        roots = [r for r in rec.insts if r.is_root]
        if len(roots) > 1:
            raise self.error(f"computation %{comp.name} has a second ROOT %{_name(roots[1].name)}",
                             roots[1].name)
        comp.root = by_name[_name(roots[0].name)] if roots else comp.instructions[-1]
        for r, inst in zip(rec.insts, comp.instructions, strict=True):
            inst.operands = [self.operand(op, by_name, comp) for op in r.operands]
            for key, value in r.attrs:
                if str(key) == "metadata":
                    inst.metadata = self.metadata(value)
                else:
                    inst.attrs[str(key)] = self.attr_value(str(key), value)
            if inst.opcode == "constant":
                inst.literal = self.literal(r, inst)
        if rec.signature is not None:
            self.check_signature(rec, comp)
        return comp

    def operand(self, rec: _Operand, by_name: dict[str, Instruction], comp: Computation) -> Instruction:
        name = _name(rec.name)
        inst = by_name.get(name)
        if inst is None:
            owner = self.owner.get(name)
            where = f" (it belongs to computation %{owner})" if owner else ""
            raise self.error(f"undefined operand %{name} in computation %{comp.name}{where}", rec.name)
        if rec.shape is not None and not same_shape(rec.shape, inst.shape):
            raise self.error(f"operand %{name} is written with shape {_shape_str(rec.shape)} but is defined "
                             f"as {_shape_str(inst.shape)}", rec.name)
        return inst

    def check_signature(self, rec: _Comp, comp: Computation) -> None:
        params, _ = rec.signature
        actual = comp.parameters
        if len(params) != len(actual):
            raise self.error(f"computation %{comp.name} declares {len(params)} parameters in its signature "
                             f"but has {len(actual)} parameter instructions", rec.name)
        for (token, shape), inst in zip(params, actual, strict=True):
            if not same_shape(shape, inst.shape):
                raise self.error(f"signature of %{comp.name} gives {_name(token)} the shape {_shape_str(shape)}"
                                 f" but parameter({inst.parameter_number}) is {_shape_str(inst.shape)}", token)

    def attr_value(self, key: str, value: Any) -> Any:
        """Type one attribute value (see the top of ir.py)."""
        if key in _KEYED_ATTRS:
            return _KEYED_ATTRS[key](self, key, value)
        if isinstance(value, Quoted):
            return value
        if isinstance(value, _Raw):
            if _INT_LIST.match(value.text):
                return tuple(int(v) for v in re.findall(r"-?\d+", value.text))
            if _SLICE.match(value.text):
                return self.slice_spec(value)
            return value.text
        text = str(value)
        if text.startswith("%") or key in COMPUTATION_ATTRS:
            comp = self.computations.get(_name(value))
            if comp is None:
                raise self.error(f"unknown computation %{_name(value)} in {key}=", value)
            return comp
        if _INT.match(text):
            return int(text)
        if _FLOAT.match(text):
            return float(text)
        return {"true": True, "false": False}.get(text, text)

    def slice_spec(self, value: _Raw) -> SliceSpec:
        ranges = []
        for m in _RANGE.finditer(value.text):
            start, limit, stride = m.groups()
            ranges.append((int(start), int(limit), int(stride) if stride is not None else 1))
        if len(ranges) != value.text.count("["):
            raise self.error(f"malformed slice {value.text} (expected {{[start:limit:stride], ...}})",
                             value.token)
        return SliceSpec(tuple(ranges))

    def window(self, key: str, value: Any) -> Window:
        """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=0x1}`` (or ``{}``);
        errors point at the offending field."""
        token = value.token if isinstance(value, _Raw) else value if isinstance(value, Token) else None
        text = value.text if isinstance(value, _Raw) else str(value)
        if not (text.startswith("{") and text.endswith("}")):
            raise self.error(f"{key}= must be a braced window such as {{size=3x3 stride=2x2}}, got {text}", token)
        fields: dict[str, tuple[list[str], Token | None]] = {}
        for m in re.finditer(r"[^\s{}]+", text):
            at = _shifted(token, m.start())
            item = _WINDOW_ITEM.fullmatch(m.group())
            if item is None or item.group(1) not in _WINDOW_SETTERS:
                raise self.error(f"malformed window field '{m.group()}' in {key}= (fields: "
                                 f"{', '.join(_WINDOW_SETTERS)})", at)
            if item.group(1) in fields:
                raise self.error(f"window field {item.group(1)} given twice in {key}=", at)
            fields[item.group(1)] = (item.group(2).split("x"), at)
        if not fields:
            return Window()
        if "size" not in fields:
            raise self.error(f"{key}={text} has no size= field", token)
        n = len(fields["size"][0])
        kwargs: list[dict[str, Any]] = [{} for _ in range(n)]
        for name, (values, at) in fields.items():
            if len(values) != n:
                raise self.error(f"window field {name} has {len(values)} dimensions but size has {n}", at)
            for kw, v in zip(kwargs, values, strict=True):
                try:
                    kw.update(_WINDOW_SETTERS[name](v))
                except ValueError:
                    raise self.error(f"window field {name}: '{v}' is not a valid value", at) from None
        return Window(tuple(WindowDim(**kw) for kw in kwargs))

    def metadata(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, _Raw):
            raise self.error("metadata must be a braced list such as {op_name=\"aten.add\"}",
                             getattr(value, "token", value if isinstance(value, Token) else None))
        items: dict[str, Any] = {}
        for key, raw in _METADATA_ITEM.findall(value.text):
            if raw.startswith('"'):
                items[key] = unquote(raw)
            else:
                items[key] = int(raw) if _INT.match(raw) else raw
        return items

    def literal(self, rec: _Inst, inst: Instruction) -> np.ndarray | None:
        if isinstance(rec.literal, Token) and rec.literal.type == "ELLIPSIS":
            return self.elided_literal(rec, inst)
        try:
            return build_literal(rec.literal, inst.shape)
        except ValueError as exc:
            raise self.error(f"constant %{inst.name}: {exc}", rec.name) from None

    def elided_literal(self, rec: _Inst, inst: Instruction) -> np.ndarray | None:
        if self.constants is None:
            return None
        data = inst.attrs.get("data")
        if not isinstance(data, Quoted):
            raise self.error(f"constant %{inst.name} is written {{...}} but has no data=\"KEY\" attribute",
                             rec.name)
        if data.text not in self.constants:
            raise self.error(f"constant %{inst.name}: no data \"{data.text}\" in the constants side file",
                             rec.name)
        try:
            return coerce_constant(self.constants[data.text], inst.shape)
        except ValueError as exc:
            raise self.error(f"constant %{inst.name}: data \"{data.text}\" {exc}", rec.name) from None


def _shifted(token: Token | None, offset: int) -> Token | None:
    """A token standing for the text ``offset`` characters into ``token`` (which lies on one line)."""
    if token is None:
        return None
    return Token(token.type, token, line=token.line, column=token.column + offset)


def _pad_pair(text: str) -> dict[str, int]:
    m = _PAD_PAIR.match(text)
    if m is None:
        raise ValueError(text)
    return {"pad_low": int(m.group(1)), "pad_high": int(m.group(2))}


def _reversal(text: str) -> dict[str, bool]:
    if text not in ("0", "1"):
        raise ValueError(text)
    return {"reversal": text == "1"}


# window field -> WindowDim keyword arguments of one dimension's text (ValueError when malformed)
_WINDOW_SETTERS = {
    "size": lambda v: {"size": int(v)},
    "stride": lambda v: {"stride": int(v)},
    "pad": _pad_pair,
    "lhs_dilate": lambda v: {"lhs_dilate": int(v)},
    "rhs_dilate": lambda v: {"rhs_dilate": int(v)},
    "rhs_reversal": _reversal,
}

def _computation_list(builder: _Builder, key: str, value: Any) -> tuple[Computation, ...]:
    """``{%a, %b}``: a conditional's branch_computations."""
    token = value.token if isinstance(value, _Raw) else value if isinstance(value, Token) else None
    text = value.text if isinstance(value, _Raw) else str(value)
    names = [n.strip() for n in text.strip().removeprefix("{").removesuffix("}").split(",") if n.strip()]
    comps = []
    for name in names:
        comp = builder.computations.get(name.removeprefix("%"))
        if comp is None:
            raise builder.error(f"unknown computation {name} in {key}=", token)
        comps.append(comp)
    return tuple(comps)


# Attributes typed by their key rather than by the look of their value.
_KEYED_ATTRS = {"window": _Builder.window, "branch_computations": _computation_list}


def _shape_str(shape: Shape) -> str:
    return format_shape(shape, with_layout=False)


def _scalar(token: Token, dtype: np.dtype) -> Any:
    text = str(token)
    if dtype == np.bool_:
        if text not in ("true", "false", "1", "0"):
            raise ValueError(f"'{text}' is not a pred value (true or false)")
        return text in ("true", "1")
    if dtype.kind in "iu":
        if not _INT.match(text.lstrip("+")):
            raise ValueError(f"'{text}' is not an integer")
        return int(text)
    if text in ("true", "false"):
        raise ValueError(f"'{text}' is not a number")
    return float(text)


def build_literal(value: Any, shape: Shape) -> np.ndarray:
    """Nested lists of SCALAR tokens -> an array of ``shape``; ValueError names what does not fit."""
    if shape.is_tuple:
        raise ValueError("tuple-shaped constants are not supported")
    dtype = HLO_DTYPES[shape.dtype]
    dims: list[int] = []
    level = value
    while isinstance(level, list):
        dims.append(len(level))
        level = level[0] if level else None
    flat: list[Token] = []

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, list):
            if depth >= len(dims) or len(v) != dims[depth]:
                raise ValueError("the literal's nested lists are ragged")
            for x in v:
                walk(x, depth + 1)
        elif depth != len(dims):
            raise ValueError("the literal's nested lists are ragged")
        else:
            flat.append(v)

    walk(value, 0)
    size_zero = not flat and shape.size == 0
    if tuple(dims) != shape.dims and not size_zero:
        raise ValueError(f"the literal has dims {dims} but the instruction declares {list(shape.dims)}")
    values = [_scalar(t, dtype) for t in flat]
    try:
        array = np.array(values, dtype=np.float64 if dtype.kind == "V" or dtype.kind == "f" else dtype)
    except OverflowError:
        raise ValueError(f"a value does not fit in {shape.dtype}") from None
    with np.errstate(over="ignore"):
        return array.astype(dtype).reshape(shape.dims)


def coerce_constant(data: Any, shape: Shape) -> np.ndarray:
    """Side-file data as the constant's dtype: raw storage (void/uint of the same width) is reinterpreted."""
    array = np.asarray(data)
    dtype = HLO_DTYPES[shape.dtype]
    if array.dtype != dtype:
        if array.dtype.itemsize == dtype.itemsize and array.dtype.kind in "Vu" and dtype.kind not in "iub":
            array = array.view(dtype)
        else:
            raise ValueError(f"has dtype {array.dtype} but the constant is {shape.dtype}")
    if tuple(array.shape) != shape.dims:
        raise ValueError(f"has dims {list(array.shape)} but the constant declares {list(shape.dims)}")
    return array


def _expected(names: set[str] | None) -> str:
    words = sorted({_WORDS.get(n, n.lower()) for n in names or ()})
    if not words:
        return ""
    if len(words) == 1:
        return f"; expected {words[0]}"
    return f"; expected one of {', '.join(words[:-1])} or {words[-1]}"


def _syntax_error(exc: UnexpectedInput, source: str | None) -> HloParseError:
    if isinstance(exc, UnexpectedToken):
        if exc.token.type == "$END":
            msg = f"syntax error: the text ends too early{_expected(exc.expected)}"
            return HloParseError(msg, exc.line if exc.line > 0 else None, exc.column, source)
        msg = f"syntax error: unexpected '{exc.token}'{_expected(exc.expected)}"
        return HloParseError(msg, exc.line, exc.column, source)
    if isinstance(exc, UnexpectedCharacters):
        msg = f"syntax error: unexpected character '{exc.char}'{_expected(exc.allowed)}"
        return HloParseError(msg, exc.line, exc.column, source)
    if isinstance(exc, UnexpectedEOF):
        return HloParseError(f"syntax error: the text ends too early{_expected(set(exc.expected))}",
                             None, None, source)
    return HloParseError(f"syntax error: {exc}", getattr(exc, "line", None), getattr(exc, "column", None),
                         source)


def parse_module(text: str, constants: dict[str, np.ndarray] | None = None,
                 source: str | None = None) -> Module:
    """Parse HLO text. ``{...}`` constants take their data from ``constants[KEY]`` (``data="KEY"``);
    with ``constants=None`` their literal stays None. ``source`` names the text in error messages."""
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, source) from None
    try:
        header, comps = _ToRecords(text, source).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, HloParseError):
            raise exc.orig_exc from None
        raise
    return _Builder(constants, source).module(header, comps)
