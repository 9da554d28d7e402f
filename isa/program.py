"""In-memory form of an ISA program: HBM tensors, access patterns and instructions.

Text syntax of an access pattern (see docs/isa.md):
  on chip:  ``sbuf[P0:P1]@OFF[S,C][S,C]:DT``   partitions P0..P1-1, byte offset OFF within each
            partition, then up to 4 free-dimension (stride, count) pairs in elements, outermost first.
  HBM:      ``hbm:NAME@OFF[PS,PC][S,C]:DT``    byte offset OFF into tensor NAME; the first pair is
            the partition dimension (element stride PS, count PC; PS=0 broadcasts one row), the rest
            are free pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

from isa.dtypes import dtype as lookup_dtype


class _cached:
    """functools.cached_property without its lock (Python 3.11 takes an RLock on every first computation: the
    compiler makes ~500,000 patterns, each computing its sizes once). The value goes into the instance dict,
    which then answers every later read (a non-data descriptor)."""

    def __init__(self, func):
        self.func, self.name, self.__doc__ = func, func.__name__, func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


MEMORIES = ("sbuf", "psum", "hbm")
ENGINES = ("pe", "act", "dve", "pool", "sp")
TENSOR_KINDS = ("input", "output", "const", "scratch")


@dataclass(frozen=True)
class AccessPattern:
    """A [partitions x free...] view of SBUF, PSUM or an HBM tensor."""

    memory: str
    dtype: str
    offset: int  # bytes: within each partition (sbuf/psum) or from the tensor start (hbm)
    pattern: tuple[tuple[int, int], ...]  # free dims: (stride in elements, count), outermost first
    start_partition: int = 0  # sbuf/psum only
    partitions: int = 1
    tensor: str | None = None  # hbm only
    partition_stride: int = 0  # hbm only: elements between consecutive partitions

    def __hash__(self) -> int:
        """The dataclass hash (of the fields, in order), computed once per pattern: the emulator's decode and
        rule checks look patterns up in dicts and sets several times each."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = self.__dict__["_hash"] = hash((self.memory, self.dtype, self.offset, self.pattern,
                                                    self.start_partition, self.partitions, self.tensor,
                                                    self.partition_stride))
        return cached

    # Derived sizes are computed once per pattern (a frozen value: GPT-2's compile asks ~65,000 times);
    # _cached stores them in the instance dict, which equality, hashing and replace() ignore.
    @_cached
    def free_shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.pattern)

    @_cached
    def free_size(self) -> int:
        """Elements per partition (from the pattern itself: decode asks most patterns for it once, before
        anything asks for their free shape)."""
        size = 1
        for _, count in self.pattern:
            size *= count
        return size

    @_cached
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *self.free_shape)

    @_cached
    def itemsize(self) -> int:
        return lookup_dtype(self.dtype).itemsize

    @_cached
    def nbytes(self) -> int:
        return self.partitions * self.free_size * self.itemsize

    def contiguous_bytes(self) -> int:
        """Length in bytes of the longest unit-stride run per partition (DMA efficiency)."""
        run = 1
        for stride, count in reversed(self.pattern):
            if stride != run:
                break
            run *= count
        return (run if self.pattern and self.pattern[-1][0] == 1 else 1) * self.itemsize

    def byte_span(self) -> tuple[int, int]:
        """[lo, hi) bytes touched within one partition (or within the tensor for HBM, per row 0)."""
        hi = self.offset
        for stride, count in self.pattern:
            hi += stride * (count - 1) * self.itemsize
        return self.offset, hi + self.itemsize


@dataclass
class Instruction:
    """One instruction of one engine's stream.

    ``operands`` maps operand names of the opcode's table entry to access patterns; ``attrs`` maps
    attribute names to int/float/str values (a per-partition scale or bias given as a pattern goes
    in ``operands``). ``waits`` are (semaphore, value) pairs that must all hold before the
    instruction starts; every semaphore in ``signals`` is incremented by one when it completes.
    """

    engine: str
    opcode: str
    operands: dict[str, AccessPattern] = field(default_factory=dict)
    attrs: dict[str, int | float | str] = field(default_factory=dict)
    waits: list[tuple[int, int]] = field(default_factory=list)
    signals: list[int] = field(default_factory=list)
    line: int | None = None  # source line in the .s text, for error messages
    comment: str = ""
    origin: str = ""  # the HLO instruction or fusion it was emitted for ("" when unknown)
    label: str = ""  # a branch target name (control flow: branch/jump/loop of the same engine)


@dataclass
class TensorDecl:
    """A tensor in HBM: a program input, output, compile-time constant or scratch buffer."""

    name: str
    kind: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * lookup_dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Source:
    """One framework origin of an HLO op: torch module path (``h.0.attn.c_attn``; "" at the top
    level), ATen op (``aten.addmm``) and ``file:line`` ("" when unknown)."""

    module: str = ""
    op: str = ""
    location: str = ""


@dataclass
class Origin:
    """What the compiler knows of one origin (an HLO instruction or fusion the program runs):
    where it came from in the model, its useful FLOPs and its compulsory HBM bytes (every operand
    read once and the result written once, as XLA's cost analysis counts bytes accessed)."""

    sources: tuple[Source, ...] = ()
    flops: int = 0
    hbm_bytes: int = 0

    @property
    def modules(self) -> tuple[str, ...]:
        """The distinct module paths, in order ("" left out)."""
        return tuple(dict.fromkeys(s.module for s in self.sources if s.module))

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.op for s in self.sources if s.op))


@dataclass
class Program:
    """A whole program: its target, HBM tensors, constant data and the instruction list.

    Instructions are kept in one list in schedule order; each engine's stream is the subsequence
    with that engine. ``inputs``/``outputs`` order the input and output tensors of the model.
    ``meta`` holds free-form compiler facts (peak SBUF bytes, useful MACs...) as str/int/float.
    ``origins`` describes each ``Instruction.origin`` name (the profile's rows).
    """

    target: str
    tensors: dict[str, TensorDecl] = field(default_factory=dict)
    instructions: list[Instruction] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    meta: dict[str, int | float | str] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)
    # Text form only: the .npz side file named by the `.constants` directive (not program content).
    constants_file: str | None = field(default=None, compare=False)

    def add_tensor(self, name: str, kind: str, dtype: str, shape: tuple[int, ...]) -> TensorDecl:
        if kind not in TENSOR_KINDS:
            raise ValueError(f"tensor kind {kind!r} not in {TENSOR_KINDS}")
        decl = TensorDecl(name, kind, dtype, tuple(shape))
        self.tensors[name] = decl
        if kind == "input":
            self.inputs.append(name)
        elif kind == "output":
            self.outputs.append(name)
        return decl

    def stream(self, engine: str) -> list[Instruction]:
        return [i for i in self.instructions if i.engine == engine]
