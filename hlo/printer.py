"""HLO module -> text, in XLA's HLO text syntax (see hlo/hlo.lark for the grammar).

The output is canonical: ``print_module(parse_module(t)) == t`` for any text this module printed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlo.ir import Computation, Instruction, Module, Quoted, Shape, SliceSpec, Window

INLINE_LITERAL_MAX = 16  # constants with more elements print as {...} with their data in a side file

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}
_ESCAPE_TABLE = str.maketrans(_ESCAPES)  # (one C pass: metadata strings are long, ~0.9 M characters for GPT-2)


def quote(text: str) -> str:
    """A string as a double-quoted HLO string literal."""
    return '"' + text.translate(_ESCAPE_TABLE) + '"'


def format_shape(shape: Shape, with_layout: bool = True) -> str:
    """``f32[3,100]{1,0}``, ``f32[]`` for scalars, ``(f32[2]{0}, s32[])`` for tuples."""
    if shape.is_tuple:
        return "(" + ", ".join(format_shape(s, with_layout) for s in shape.tuple_shapes) + ")"
    text = f"{shape.dtype}[{','.join(str(d) for d in shape.dims)}]"
    if with_layout and shape.rank > 0:
        text += "{" + ",".join(str(d) for d in shape.minor_to_major) + "}"
    return text


def format_float(value: Any, dtype: np.dtype) -> str:
    """The shortest decimal that reads back as exactly ``value`` in ``dtype`` (``1`` for 1.0, ``inf``)."""
    x = float(value)
    if not np.isfinite(x):
        return str(x)
    with np.errstate(over="ignore"):
        for digits in range(1, 18):
            text = f"{x:.{digits}g}"
            if np.array(float(text)).astype(dtype) == np.array(x).astype(dtype):
                return text
    return repr(x)


def format_scalar(value: Any, dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "true" if value else "false"
    if dtype.kind in "iu":
        return str(int(value))
    return format_float(value, dtype)


def format_literal(literal: np.ndarray) -> str:
    """A constant's data in XLA's nested-brace syntax: ``0``, ``{1, 2}``, ``{ {1, 2}, {3, 4} }``."""
    dtype = literal.dtype

    def nested(a: np.ndarray) -> str:
        if a.ndim == 1:
            return "{" + ", ".join(format_scalar(v, dtype) for v in a) + "}"
        return "{ " + ", ".join(nested(sub) for sub in a) + " }"

    if literal.ndim == 0:
        return format_scalar(literal[()], dtype)
    return nested(literal)


def format_attr_value(value: Any) -> str:
    """One attribute value, typed as described at the top of ir.py."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | np.integer | np.floating):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Quoted):
        return quote(value.text)
    if isinstance(value, Computation):
        return f"%{value.name}"
    if isinstance(value, SliceSpec):
        return "{" + ", ".join(_format_range(r) for r in value.ranges) + "}"
    if isinstance(value, Window):
        return format_window(value)
    if isinstance(value, tuple | list) and value and all(isinstance(v, Computation) for v in value):
        return "{" + ", ".join(f"%{v.name}" for v in value) + "}"  # conditional's branch_computations
    if isinstance(value, tuple | list):
        return "{" + ",".join(str(int(v)) for v in value) + "}"
    raise TypeError(f"cannot print attribute value {value!r} of type {type(value).__name__}")


# Window fields in XLA's order: (name, per-dimension text, the default that lets the field be omitted)
WINDOW_FIELDS: tuple[tuple[str, Any, str | None], ...] = (
    ("size", lambda d: str(d.size), None),
    ("stride", lambda d: str(d.stride), "1"),
    ("pad", lambda d: f"{d.pad_low}_{d.pad_high}", "0_0"),
    ("lhs_dilate", lambda d: str(d.lhs_dilate), "1"),
    ("rhs_dilate", lambda d: str(d.rhs_dilate), "1"),
    ("rhs_reversal", lambda d: "1" if d.reversal else "0", "0"),
)


def format_window(window: Window) -> str:
    """``{size=3x3 stride=2x2 pad=1_1x1_1}``: a field appears when some dimension differs from its default."""
    parts = []
    for name, text, default in WINDOW_FIELDS:
        values = [text(d) for d in window.dims]
        if window.dims and (default is None or any(v != default for v in values)):
            parts.append(f"{name}={'x'.join(values)}")
    return "{" + " ".join(parts) + "}"


def _format_range(r: tuple[int, int, int]) -> str:
    start, limit, stride = r
    return f"[{start}:{limit}]" if stride == 1 else f"[{start}:{limit}:{stride}]"


def format_metadata(metadata: dict[str, Any]) -> str:
    """``{op_name="aten.linear" source_file="mlp.py" source_line=12}``."""
    items = [f"{k}={v}" if isinstance(v, int) else f"{k}={quote(str(v))}" for k, v in metadata.items()]
    return "{" + " ".join(items) + "}"


def constant_key(inst: Instruction) -> str:
    """The side-file key of a large constant: its ``data`` attribute, else its name."""
    data = inst.attrs.get("data")
    return data.text if isinstance(data, Quoted) else inst.name


def is_elided(inst: Instruction) -> bool:
    """Whether a constant prints as ``{...}`` (its data goes to the side file)."""
    return inst.opcode == "constant" and (inst.literal is None or inst.literal.size > INLINE_LITERAL_MAX)


def _attributes(inst: Instruction) -> list[tuple[str, Any]]:
    attrs = list(inst.attrs.items())
    if is_elided(inst) and "data" not in inst.attrs:
        attrs.append(("data", Quoted(inst.name)))
    return attrs


def format_instruction(inst: Instruction, is_root: bool = False) -> str:
    """One instruction line (without indentation)."""
    if inst.opcode == "constant":
        args = "{...}" if is_elided(inst) else format_literal(inst.literal)
    elif inst.opcode == "parameter":
        args = str(inst.parameter_number)
    else:
        args = ", ".join(f"{format_shape(op.shape)} %{op.name}" for op in inst.operands)
    text = f"{'ROOT ' if is_root else ''}%{inst.name} = {format_shape(inst.shape)} {inst.opcode}({args})"
    for key, value in _attributes(inst):
        text += f", {key}={format_attr_value(value)}"
    if inst.metadata:
        text += f", metadata={format_metadata(inst.metadata)}"
    return text


def _signature(comp: Computation) -> str:
    params = ", ".join(f"{p.name}: {format_shape(p.shape, False)}" for p in comp.parameters)
    result = format_shape(comp.root.shape, False) if comp.root is not None else "()"
    return f"({params}) -> {result}"


def format_computation(comp: Computation, entry: bool = False) -> str:
    lines = [f"{'ENTRY ' if entry else ''}%{comp.name} {_signature(comp)} {{"]
    lines += [f"  {format_instruction(inst, inst is comp.root)}" for inst in comp.instructions]
    lines.append("}")
    return "\n".join(lines)


def entry_computation_layout(module: Module) -> str:
    entry = module.entry
    params = ", ".join(format_shape(p.shape) for p in entry.parameters)
    return f"{{({params})->{format_shape(entry.root.shape)}}}"


def print_module(module: Module, header_attrs: dict[str, Any] | None = None) -> str:
    """The module as HLO text; ``header_attrs`` override/extend ``module.attrs`` in the header."""
    attrs = {**module.attrs, **(header_attrs or {})}
    header = f"HloModule {module.name}"
    for key, value in attrs.items():
        header += f", {key}={format_attr_value(value)}"
    if module.entry is not None and module.entry.root is not None:
        header += f", entry_computation_layout={entry_computation_layout(module)}"
    parts = [header]
    parts += [format_computation(c, c is module.entry) for c in module.computations]
    return "\n\n".join(parts) + "\n"

