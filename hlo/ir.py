"""HLO data structures: shapes, instructions, computations and modules (XLA's HLO, simplified).

Attribute values (``Instruction.attrs``) are typed so the printer and parser agree:
  tuple[int, ...]  -> ``{1,0}``             e.g. dimensions, lhs_contracting_dims
  int / float      -> ``3`` / ``0.5``
  str              -> a bare token           e.g. direction=GT, kind=kOutput
  Quoted           -> a quoted string        e.g. custom_call_target="..."
  Computation      -> ``%name``              e.g. to_apply, calls
  SliceSpec        -> ``{[0:3], [0:5:2]}`` (the stride is printed only when it is not 1)
  Window           -> ``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=2x2 rhs_reversal=0x1}``
                      (each field printed only when some dimension differs from its default; ``{}`` for none)
Called computations are referenced by attribute (``calls``, ``to_apply``), never inlined.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from math import prod
from typing import Any

import ml_dtypes
import numpy as np

# XLA primitive type names -> numpy dtypes.
HLO_DTYPES: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8),
    "s16": np.dtype(np.int16),
    "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
FLOAT_DTYPES = ("f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2")


def numpy_dtype(hlo_dtype: str) -> np.dtype:
    return HLO_DTYPES[hlo_dtype]


def hlo_dtype_of(np_dtype: np.dtype) -> str:
    for name, dt in HLO_DTYPES.items():
        if dt == np_dtype:
            return name
    raise KeyError(f"no HLO type for numpy dtype {np_dtype}")


@dataclass(frozen=True)
class Shape:
    """An array shape (dtype, dims, minor-to-major layout) or a tuple of shapes."""

    dtype: str
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None  # minor-to-major; None means the default {n-1,...,0}
    tuple_shapes: tuple[Shape, ...] | None = None

    @staticmethod
    def array(dtype: str, dims: Iterable[int]) -> Shape:
        return Shape(dtype, tuple(int(d) for d in dims))

    @staticmethod
    def tuple_of(shapes: Iterable[Shape]) -> Shape:
        return Shape("tuple", (), None, tuple(shapes))

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return prod(self.dims)

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        return self.layout if self.layout is not None else tuple(reversed(range(self.rank)))

    @property
    def nbytes(self) -> int:
        if self.is_tuple:
            return sum(s.nbytes for s in self.tuple_shapes)
        return self.size * numpy_dtype(self.dtype).itemsize

    def with_dtype(self, dtype: str) -> Shape:
        return Shape(dtype, self.dims, self.layout)


@dataclass(frozen=True)
class Quoted:
    """A quoted string attribute value."""

    text: str


@dataclass(frozen=True)
class SliceSpec:
    """Per-dimension (start, limit, stride) of a slice."""

    ranges: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class WindowDim:
    """One dimension of a window (XLA's ``WindowDimension``): the window slides with ``stride`` over the
    input after it was dilated by ``lhs_dilate`` (base dilation: ``lhs_dilate - 1`` holes between elements)
    and padded by ``pad_low``/``pad_high`` (negative pads crop); the window itself is dilated by
    ``rhs_dilate``; ``reversal`` flips it (convolution only)."""

    size: int
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilate: int = 1
    rhs_dilate: int = 1
    reversal: bool = False


@dataclass(frozen=True)
class Window:
    """The ``window`` attribute of ``convolution`` and ``reduce-window``: one WindowDim per spatial (conv)
    or operand (reduce-window) dimension."""

    dims: tuple[WindowDim, ...] = ()

    @staticmethod
    def make(size: Iterable[int], stride: Iterable[int] | None = None,
             pad: Iterable[tuple[int, int]] | None = None, lhs_dilate: Iterable[int] | None = None,
             rhs_dilate: Iterable[int] | None = None) -> Window:
        """A window from per-dimension lists, e.g. ``Window.make((3, 3), stride=(2, 2), pad=((1, 1), (1, 1)))``."""
        size = [int(s) for s in size]
        n = len(size)
        stride = [int(s) for s in stride] if stride is not None else [1] * n
        pad = [(int(lo), int(hi)) for lo, hi in pad] if pad is not None else [(0, 0)] * n
        lhs = [int(d) for d in lhs_dilate] if lhs_dilate is not None else [1] * n
        rhs = [int(d) for d in rhs_dilate] if rhs_dilate is not None else [1] * n
        if not len(stride) == len(pad) == len(lhs) == len(rhs) == n:
            raise ValueError(f"window fields have different lengths: size {size}, stride {stride}, pad {pad}, "
                             f"lhs_dilate {lhs}, rhs_dilate {rhs}")
        return Window(tuple(WindowDim(s, st, lo, hi, ld, rd)
                            for s, st, (lo, hi), ld, rd in zip(size, stride, pad, lhs, rhs, strict=True)))


_ids = itertools.count()


@dataclass(eq=False)
class Instruction:
    """One HLO instruction. Identity is object identity; ``name`` is unique within a module."""

    name: str
    opcode: str
    shape: Shape
    operands: list[Instruction] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    literal: np.ndarray | None = None  # constant data
    parameter_number: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # op_name, source_file, source_line
    uid: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"<{self.opcode} %{self.name}>"

    def called_computations(self) -> list[Computation]:
        """The computations the attributes name (a conditional's branch_computations= is a list of them)."""
        found: list[Computation] = []
        for v in self.attrs.values():
            if isinstance(v, Computation):
                found.append(v)
            elif isinstance(v, tuple | list):
                found.extend(c for c in v if isinstance(c, Computation))
        return found

    def where(self) -> str:
        """Human-readable origin: the PyTorch op and source line when known."""
        parts = [f"%{self.name} ({self.opcode})"]
        if "op_name" in self.metadata:
            parts.append(f"from {self.metadata['op_name']}")
        if "source_file" in self.metadata:
            parts.append(f"at {self.metadata['source_file']}:{self.metadata.get('source_line', '?')}")
        return " ".join(parts)


class Computation:
    """An ordered list of instructions (defs before uses) with one ROOT."""

    def __init__(self, name: str, instructions: list[Instruction] | None = None,
                 root: Instruction | None = None):
        self.name = name
        self.instructions: list[Instruction] = list(instructions or [])
        self.root: Instruction | None = root or (self.instructions[-1] if self.instructions else None)

    def __repr__(self) -> str:
        return f"<Computation %{self.name}>"

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number)

    def add(self, instruction: Instruction) -> Instruction:
        self.instructions.append(instruction)
        return instruction

    def users(self) -> dict[Instruction, list[Instruction]]:
        """Map each instruction to the instructions that use it (in order, with repeats removed)."""
        result: dict[Instruction, list[Instruction]] = {i: [] for i in self.instructions}
        for inst in self.instructions:
            for op in dict.fromkeys(inst.operands):
                result.setdefault(op, []).append(inst)
        return result

    def replace_all_uses(self, old: Instruction, new: Instruction) -> None:
        for inst in self.instructions:
            inst.operands = [new if o is old else o for o in inst.operands]
        if self.root is old:
            self.root = new

    def remove(self, instruction: Instruction) -> None:
        self.instructions.remove(instruction)

    def post_order(self) -> list[Instruction]:
        """Instructions reachable from ROOT (plus parameters), defs before uses."""
        seen: set[int] = set()
        order: list[Instruction] = []

        def visit(inst: Instruction) -> None:
            stack = [(inst, False)]
            while stack:
                node, done = stack.pop()
                if done:
                    order.append(node)
                    continue
                if node.uid in seen:
                    continue
                seen.add(node.uid)
                stack.append((node, True))
                stack.extend((op, False) for op in reversed(node.operands) if op.uid not in seen)

        for p in self.parameters:
            visit(p)
        if self.root is not None:
            visit(self.root)
        return order


class Module:
    """A module: named computations, the entry one last, plus module-level attributes."""

    def __init__(self, name: str, computations: list[Computation] | None = None,
                 entry: Computation | None = None):
        self.name = name
        self.computations: list[Computation] = list(computations or [])
        self.entry: Computation | None = entry or (self.computations[-1] if self.computations else None)
        self.attrs: dict[str, Any] = {}  # e.g. neuronc_constants=Quoted("file.npz")
        self._names: set[str] = set()

    def __repr__(self) -> str:
        return f"<Module {self.name}>"

    def add_computation(self, comp: Computation, entry: bool = False) -> Computation:
        if entry:
            self.computations.append(comp)
            self.entry = comp
        else:
            # non-entry computations go before the entry so that the text defines them first
            idx = self.computations.index(self.entry) if self.entry in self.computations else len(self.computations)
            self.computations.insert(idx, comp)
        return comp

    def computation(self, name: str) -> Computation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)

    def all_instructions(self) -> Iterator[Instruction]:
        for comp in self.computations:
            yield from comp.instructions

    def unique_name(self, base: str) -> str:
        """A name not used by any instruction or computation of the module."""
        if not self._names:
            self._names = {i.name for i in self.all_instructions()} | {c.name for c in self.computations}
        name, n = base, 0
        while name in self._names:
            n += 1
            name = f"{base}.{n}"
        self._names.add(name)
        return name
