"""Byte-addressed memories of one NeuronCore and numpy views of access patterns.

SBUF and PSUM are ``[partitions, bytes_per_partition]`` uint8 arrays; HBM is one uint8 buffer per
``TensorDecl``. An ``AccessPattern`` becomes a strided numpy *view* of shape
``(partitions, *free_shape)`` typed with the pattern's dtype, so instructions read and write memory
without per-element Python.

Constants no instruction writes are not copied: their HBM buffer *is* the constant's bytes (a
read-only view, e.g. of a memory-mapped weights file). A ``Memory`` is reused by later runs of the
same decoded program (the views of its decoded instructions stay valid): ``reset`` zeroes what a
run may have changed and restores the constants the program writes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from isa.dtypes import dtype as lookup_dtype
from isa.errors import InputError, ProgramError
from isa.instructions import OPCODES
from isa.program import AccessPattern, Program
from isa.target import Target

# opcode -> the names of its operands of write access
_WRITTEN: dict[str, tuple[str, ...]] = {name: tuple(o.name for o in spec.operands if o.access == "w")
                                        for name, spec in OPCODES.items()}


def written_tensors(program: Program) -> frozenset[str]:
    """The HBM tensors some instruction writes (an operand of write access on ``hbm``)."""
    written = set()
    for inst in program.instructions:
        operands = inst.operands
        for name in _WRITTEN.get(inst.opcode, ()):  # an unknown opcode is the decoder's error
            ap = operands.get(name)
            if ap is not None and ap.memory == "hbm":
                written.add(ap.tensor)
    return frozenset(written)


_NUMPY_DTYPES: dict[str, np.dtype] = {}  # machine dtype name -> numpy dtype


class Memory:
    """The state of SBUF, PSUM and the HBM tensors of one program run."""

    def __init__(self, program: Program, target: Target):
        parts = target.partitions
        self.sbuf = np.zeros((parts, target.sbuf_partition_bytes), dtype=np.uint8)
        self.psum = np.zeros((parts, target.psum_partition_bytes), dtype=np.uint8)
        self.program = program
        written = written_tensors(program)
        self.hbm: dict[str, np.ndarray] = {}
        self.shared: set[str] = set()  # constants whose buffer is the constant's own bytes
        for name, decl in program.tensors.items():
            if decl.kind == "const" and name not in written:
                self.hbm[name] = self._constant_bytes(name)
                self.shared.add(name)
            else:
                self.hbm[name] = np.zeros(decl.nbytes, dtype=np.uint8)
        self.views: dict[AccessPattern, np.ndarray] = {}  # one view per distinct pattern
        self.geometry: dict[tuple, tuple] = {}  # see _new_view
        self.used = False  # a run has touched the buffers since they were zeroed

    def _constant_bytes(self, name: str) -> np.ndarray:
        """The bytes of constant ``name`` without a copy when its array is C-contiguous."""
        if name not in self.program.constants:
            raise ProgramError(f"constant tensor {name!r} has no data in program.constants")
        value = np.asarray(self.program.constants[name])
        self._check(name, value, ProgramError, "constant")
        return np.ascontiguousarray(value).reshape(-1).view(np.uint8)

    def reset(self) -> None:
        """Zero SBUF, PSUM and every HBM tensor a run may have written (constants are restored
        by ``load_inputs``), so a reused Memory starts as a fresh one."""
        if not self.used:
            return
        self.sbuf.fill(0)
        self.psum.fill(0)
        for name, buffer in self.hbm.items():
            if name not in self.shared:
                buffer.fill(0)
        self.used = False

    def on_chip(self, memory: str) -> np.ndarray:
        return self.sbuf if memory == "sbuf" else self.psum

    def view(self, ap: AccessPattern) -> np.ndarray:
        """A writable strided view of ``ap`` with shape ``(partitions, *free_shape)``.

        The caller has checked the bounds (see ``isa.emulator.rules``).
        """
        view = self.views.get(ap)
        return view if view is not None else self.make_view(ap)

    def make_view(self, ap: AccessPattern) -> np.ndarray:
        """A new view of ``ap`` (see ``view``), remembered for the next ``view(ap)``."""
        view = self.views[ap] = self._new_view(ap)
        return view

    def _new_view(self, ap: AccessPattern) -> np.ndarray:
        key = (ap.memory, ap.tensor, ap.dtype, ap.pattern, ap.partitions, ap.partition_stride)
        geometry = self.geometry.get(key)  # patterns that differ only in where they start share the rest
        if geometry is None:
            geometry = self.geometry[key] = self.geometry_of(ap)
        base, dt, shape, strides, row = geometry
        offset = ap.offset if row is None else ap.start_partition * row + ap.offset
        return np.ndarray(shape, dtype=dt, buffer=base, offset=offset, strides=strides)

    def geometry_of(self, ap: AccessPattern) -> tuple[np.ndarray, np.dtype, tuple[int, ...], tuple[int, ...],
                                                      int | None]:
        """(buffer, numpy dtype, shape, strides, bytes per partition row on chip or None in HBM) of ``ap``."""
        dt = _NUMPY_DTYPES.get(ap.dtype) or _NUMPY_DTYPES.setdefault(ap.dtype, lookup_dtype(ap.dtype).numpy)
        size = dt.itemsize
        if ap.memory == "hbm":
            base = self.hbm[ap.tensor]
            row = None
            strides = [ap.partition_stride * size]
        else:
            base = self.sbuf if ap.memory == "sbuf" else self.psum
            row = base.shape[1]
            strides = [row]
        shape = [ap.partitions]
        for stride, count in ap.pattern:
            strides.append(stride * size)
            shape.append(count)
        return base, dt, tuple(shape), tuple(strides), row

    def load_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Copy the program inputs and constants into their HBM buffers, checking names, shapes, dtypes."""
        program = self.program
        unknown = sorted(set(inputs) - set(program.inputs))
        if unknown:
            raise InputError(f"unknown input(s) {', '.join(unknown)}; the program's inputs are "
                             f"{', '.join(program.inputs) or '(none)'}")
        for name in program.inputs:
            if name not in inputs:
                raise InputError(f"missing input {name!r}; the program's inputs are "
                                 f"{', '.join(program.inputs)}")
            self._fill(name, np.asarray(inputs[name]), InputError, "input")
        for name, decl in program.tensors.items():
            if decl.kind != "const" or name in self.shared:
                continue
            if name not in program.constants:
                raise ProgramError(f"constant tensor {name!r} has no data in program.constants")
            self._fill(name, np.asarray(program.constants[name]), ProgramError, "constant")

    def _check(self, name: str, value: np.ndarray, error: type[Exception], what: str) -> None:
        decl = self.program.tensors[name]
        want = lookup_dtype(decl.dtype).numpy
        if value.shape != tuple(decl.shape) or value.dtype != want:
            raise error(f"{what} {name!r}: expected {decl.dtype}{list(decl.shape)} "
                        f"(numpy {want}), given {value.dtype}{list(value.shape)}")

    def _fill(self, name: str, value: np.ndarray, error: type[Exception], what: str) -> None:
        self._check(name, value, error, what)
        self.hbm[name][:] = np.ascontiguousarray(value).reshape(-1).view(np.uint8)

    def read_tensor(self, name: str) -> np.ndarray:
        """A copy of HBM tensor ``name``, shaped and typed as declared."""
        decl = self.program.tensors[name]
        return self.hbm[name].view(lookup_dtype(decl.dtype).numpy).reshape(decl.shape).copy()
