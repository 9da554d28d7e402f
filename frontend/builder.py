"""Emit HLO instructions into the entry computation, computing each result shape.

The builder is the only place that creates ``Instruction`` objects for the frontend. Every instruction
receives the metadata of the fx node being lowered (``builder.metadata``), so lowering rules never
handle metadata themselves. Broadcasting follows XLA: operands are brought to the result shape by an
explicit ``broadcast`` (``dimensions`` maps operand dims to result dims, sizes equal) after a
``reshape`` that drops the size-1 dims being expanded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np
import torch

from hlo.errors import LoweringError, VerificationError
from hlo.ir import (
    Computation,
    Instruction,
    Module,
    Quoted,
    Shape,
    SliceSpec,
    Window,
    hlo_dtype_of,
    numpy_dtype,
)
from hlo.shape_inference import infer_shape

TORCH_TO_HLO: dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float64: "f64",
    torch.int64: "s64",
    torch.int32: "s32",
    torch.int16: "s16",
    torch.int8: "s8",
    torch.uint8: "u8",
    torch.bool: "pred",
    torch.float8_e4m3fn: "f8e4m3fn",
    torch.float8_e5m2: "f8e5m2",
}
HLO_TO_TORCH: dict[str, torch.dtype] = {v: k for k, v in TORCH_TO_HLO.items()}

# Reduction kinds -> the opcode of the scalar combiner computation (identities: reduction_identity).
_REDUCERS: dict[str, str] = {"add": "add", "max": "maximum", "min": "minimum", "mul": "multiply",
                             "and": "and", "or": "or"}


def hlo_dtype(dtype: torch.dtype) -> str:
    """The HLO primitive type name of a torch dtype."""
    try:
        return TORCH_TO_HLO[dtype]
    except KeyError:
        raise LoweringError(f"dtype {dtype} has no HLO equivalent") from None


# numpy has no bf16/fp8: such tensors are read through a same-size integer view.
_VIA_INT = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8, torch.float8_e5m2: torch.uint8}


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The values of a (CPU or not, grad or not) tensor as a read-only numpy array, bf16/fp8 as ml_dtypes
    arrays. A contiguous CPU tensor's memory is shared, not copied (GPT-2's 500 MB of weights): the
    compiler never writes a constant, and the driver copies what still shares a tensor's memory into the
    finished program (`detach_from_torch`), so that a compiled program does not change with its model."""
    t = tensor.detach().cpu().contiguous()
    dtype = hlo_dtype(t.dtype)
    if t.dtype in _VIA_INT:
        array = t.view(_VIA_INT[t.dtype]).numpy().view(numpy_dtype(dtype))
    else:
        array = t.numpy()
    array.flags.writeable = False
    return array


def shares_torch_memory(array: np.ndarray) -> bool:
    """Is ``array`` a view of a torch tensor's memory (made by `tensor_to_numpy`)? The chain of bases is
    followed through numpy's own holders too (``as_strided`` keeps its source behind a ``DummyArray``)."""
    base: Any = array
    while base is not None and not isinstance(base, torch.Tensor):
        base = getattr(base, "base", None)
    return base is not None


def broadcast_dims(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Numpy/torch broadcasting of two dim tuples."""
    try:
        return tuple(torch.broadcast_shapes(tuple(a), tuple(b)))
    except RuntimeError as e:
        raise LoweringError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast: {e}") from None


def reduction_identity(kind: str, dtype: str) -> Any:
    np_dt = numpy_dtype(dtype)
    if kind == "add" or kind == "or":
        return 0
    if kind == "mul" or kind == "and":
        return 1
    if dtype == "pred":
        return kind == "min"
    if np.issubdtype(np_dt, np.integer):
        info = np.iinfo(np_dt)
        return info.min if kind == "max" else info.max
    return -np.inf if kind == "max" else np.inf


class HloBuilder:
    """Builds the entry computation ``main`` of a new module."""

    def __init__(self, module_name: str):
        self.module = Module(module_name)
        self.comp = self.module.add_computation(Computation(self.module.unique_name("main")), entry=True)
        self.metadata: dict[str, Any] = {}
        self._reducers: dict[tuple[str, str], Computation] = {}
        self._data_keys: set[str] = set()

    # ---- generic emission -------------------------------------------------------------------------
    def emit(self, opcode: str, shape: Shape, operands: Sequence[Instruction] = (), *,
             literal: np.ndarray | None = None, parameter_number: int | None = None,
             name: str | None = None, **attrs: Any) -> Instruction:
        """Append an instruction named ``name`` (default: the opcode), made unique in the module."""
        inst = Instruction(self.module.unique_name(name or opcode), opcode, shape, list(operands), dict(attrs),
                           literal=literal, parameter_number=parameter_number,
                           metadata=dict(self.metadata))
        return self.comp.add(inst)

    def emit_inferred(self, opcode: str, operands: Sequence[Instruction], **attrs: Any) -> Instruction:
        """Append an instruction whose shape the IR's shape inference derives from operands and attrs."""
        try:
            shape = infer_shape(opcode, [o.shape for o in operands], attrs)
        except VerificationError as e:
            raise LoweringError(f"{opcode}: {e}") from None
        return self.emit(opcode, shape, operands, **attrs)

    def computation(self, name: str, params: Sequence[Shape],
                    body: Callable[[list[Instruction]], Instruction]) -> Computation:
        """A new non-entry computation: ``body`` emits into it (with this builder) from its parameters."""
        comp = Computation(self.module.unique_name(name))
        saved, self.comp = self.comp, comp
        try:
            args = [self.parameter(i, shape, f"p{i}") for i, shape in enumerate(params)]
            comp.root = body(args)
        finally:
            self.comp = saved
        return self.module.add_computation(comp)

    def finish(self, outputs: Sequence[Instruction]) -> Module:
        """Set ROOT (a tuple when there are several outputs) and drop instructions nothing uses."""
        root = outputs[0] if len(outputs) == 1 else self.tuple(outputs)
        self.comp.root = root
        live = {i.uid for i in self.comp.post_order()}
        self.comp.instructions = [i for i in self.comp.instructions if i.uid in live]
        return self.module

    # ---- leaves -----------------------------------------------------------------------------------
    def parameter(self, number: int, shape: Shape, name: str = "parameter") -> Instruction:
        return self.emit("parameter", shape, parameter_number=number, name=name)

    def constant(self, array: np.ndarray, data_key: str | None = None) -> Instruction:
        """A constant; ``data_key`` (made unique in the module) names large data such as weights. Data
        too large to print inline (more than 16 elements) gets the key "constant" when none is given."""
        array = np.asarray(array, order="C")  # keeps 0-d arrays 0-d
        shape = Shape.array(_hlo_of_numpy(array.dtype), array.shape)
        attrs: dict[str, Any] = {}
        if data_key is None and array.size > 16:
            data_key = "constant"
        if data_key is not None:
            key, n = data_key, 0
            while key in self._data_keys:
                n += 1
                key = f"{data_key}.{n}"
            self._data_keys.add(key)
            attrs["data"] = Quoted(key)
        return self.emit("constant", shape, literal=array, **attrs)

    def scalar(self, value: Any, dtype: str) -> Instruction:
        return self.constant(np.array(value, dtype=numpy_dtype(dtype)))

    def full(self, value: Any, dtype: str, dims: Sequence[int]) -> Instruction:
        """``value`` broadcast to ``dims`` (a scalar constant when dims is empty)."""
        return self.broadcast(self.scalar(value, dtype), dims, ())

    # ---- shape ops --------------------------------------------------------------------------------
    def reshape(self, x: Instruction, dims: Sequence[int]) -> Instruction:
        dims = tuple(int(d) for d in dims)
        if dims == x.shape.dims:
            return x
        if prod(dims) != x.shape.size:
            raise LoweringError(f"cannot reshape {x.shape.dims} to {dims}")
        return self.emit("reshape", Shape.array(x.shape.dtype, dims), [x])

    def transpose(self, x: Instruction, perm: Sequence[int]) -> Instruction:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(x.shape.rank)):
            return x
        dims = tuple(x.shape.dims[p] for p in perm)
        return self.emit("transpose", Shape.array(x.shape.dtype, dims), [x], dimensions=perm)

    def broadcast(self, x: Instruction, dims: Sequence[int], mapping: Sequence[int]) -> Instruction:
        """XLA broadcast: operand dim i becomes result dim ``mapping[i]`` (sizes must be equal)."""
        dims, mapping = tuple(int(d) for d in dims), tuple(int(m) for m in mapping)
        if dims == x.shape.dims and mapping == tuple(range(len(dims))):
            return x
        for i, m in enumerate(mapping):
            if x.shape.dims[i] != dims[m]:
                raise LoweringError(f"cannot broadcast {x.shape.dims} to {dims} with dimensions={mapping}")
        return self.emit("broadcast", Shape.array(x.shape.dtype, dims), [x], dimensions=mapping)

    def broadcast_to(self, x: Instruction, dims: Sequence[int]) -> Instruction:
        """Numpy-style broadcast of ``x`` to ``dims`` (trailing alignment, size-1 dims expand)."""
        dims = tuple(int(d) for d in dims)
        if x.shape.dims == dims:
            return x
        offset = len(dims) - x.shape.rank
        if offset < 0:
            raise LoweringError(f"cannot broadcast {x.shape.dims} to {dims}")
        kept = [i for i, d in enumerate(x.shape.dims) if d == dims[i + offset]]
        if len(kept) != x.shape.rank:
            if any(x.shape.dims[i] != 1 for i in range(x.shape.rank) if i not in kept):
                raise LoweringError(f"cannot broadcast {x.shape.dims} to {dims}")
            x = self.reshape(x, [x.shape.dims[i] for i in kept])
        return self.broadcast(x, dims, [i + offset for i in kept])

    def slice(self, x: Instruction, ranges: Sequence[tuple[int, int, int]]) -> Instruction:
        ranges = tuple((int(a), int(b), int(s)) for a, b, s in ranges)
        if all(r == (0, d, 1) for r, d in zip(ranges, x.shape.dims)):
            return x
        dims = tuple(max(0, -(-(b - a) // s)) for a, b, s in ranges)
        return self.emit("slice", Shape.array(x.shape.dtype, dims), [x], slice=SliceSpec(ranges))

    def iota(self, dtype: str, dims: Sequence[int], dimension: int) -> Instruction:
        """0, 1, 2, ... along ``dimension``, broadcast over the other dims."""
        return self.emit("iota", Shape.array(dtype, dims), iota_dimension=int(dimension))

    def pad(self, x: Instruction, value: Instruction, config: Sequence[tuple[int, int]]) -> Instruction:
        """XLA pad with (low, high) per dim (negative crops); ``value`` is a scalar of x's dtype."""
        dims = [n + lo + hi for n, (lo, hi) in zip(x.shape.dims, config)]
        if any(d < 0 for d in dims):
            raise LoweringError(f"padding {list(config)} of {x.shape.dims} leaves a negative size")
        padding = "x".join(f"{lo}_{hi}" for lo, hi in config)
        return self.emit("pad", Shape.array(x.shape.dtype, dims), [x, value], padding=padding)

    def concatenate(self, xs: Sequence[Instruction], dim: int) -> Instruction:
        if len(xs) == 1:
            return xs[0]
        dims = list(xs[0].shape.dims)
        dims[dim] = sum(x.shape.dims[dim] for x in xs)
        return self.emit("concatenate", Shape.array(xs[0].shape.dtype, dims), xs, dimensions=(dim,))

    # ---- elementwise ------------------------------------------------------------------------------
    def convert(self, x: Instruction, dtype: str) -> Instruction:
        if x.shape.dtype == dtype:
            return x
        return self.emit("convert", x.shape.with_dtype(dtype), [x])

    def unary(self, opcode: str, x: Instruction) -> Instruction:
        return self.emit(opcode, x.shape, [x])

    def binary(self, opcode: str, x: Instruction, y: Instruction) -> Instruction:
        """Elementwise op on two operands, broadcast numpy-style to a common shape (same dtype)."""
        if x.shape.dtype != y.shape.dtype:
            raise LoweringError(f"{opcode} of {x.shape.dtype} and {y.shape.dtype}")
        dims = broadcast_dims(x.shape.dims, y.shape.dims)
        x, y = self.broadcast_to(x, dims), self.broadcast_to(y, dims)
        return self.emit(opcode, x.shape, [x, y])

    def compare(self, x: Instruction, y: Instruction, direction: str) -> Instruction:
        dims = broadcast_dims(x.shape.dims, y.shape.dims)
        x, y = self.broadcast_to(x, dims), self.broadcast_to(y, dims)
        return self.emit("compare", Shape.array("pred", dims), [x, y], direction=direction)

    def select(self, pred: Instruction, on_true: Instruction, on_false: Instruction) -> Instruction:
        dims = broadcast_dims(broadcast_dims(pred.shape.dims, on_true.shape.dims), on_false.shape.dims)
        operands = [self.broadcast_to(v, dims) for v in (pred, on_true, on_false)]
        return self.emit("select", operands[1].shape, operands)

    def custom_call(self, target: str, operands: Sequence[Instruction], shape: Shape) -> Instruction:
        return self.emit("custom-call", shape, operands, custom_call_target=Quoted(target))

    # ---- contractions and reductions --------------------------------------------------------------
    def dot(self, lhs: Instruction, rhs: Instruction, lhs_contracting: Sequence[int],
            rhs_contracting: Sequence[int], lhs_batch: Sequence[int] = (),
            rhs_batch: Sequence[int] = ()) -> Instruction:
        """XLA dot: result dims = batch dims, lhs free dims, rhs free dims."""
        lc, rc, lb, rb = (tuple(int(d) for d in v)
                          for v in (lhs_contracting, rhs_contracting, lhs_batch, rhs_batch))
        ld, rd = lhs.shape.dims, rhs.shape.dims
        if [ld[i] for i in lc] != [rd[i] for i in rc] or [ld[i] for i in lb] != [rd[i] for i in rb]:
            raise LoweringError(f"dot of {ld} and {rd}: contracting/batch dims do not match")
        if lhs.shape.dtype != rhs.shape.dtype:
            raise LoweringError(f"dot of {lhs.shape.dtype} and {rhs.shape.dtype}")
        dims = ([ld[i] for i in lb] + [d for i, d in enumerate(ld) if i not in lc + lb]
                + [d for i, d in enumerate(rd) if i not in rc + rb])
        attrs: dict[str, Any] = {"lhs_contracting_dims": lc, "rhs_contracting_dims": rc}
        if lb:
            attrs.update(lhs_batch_dims=lb, rhs_batch_dims=rb)
        return self.emit("dot", Shape.array(lhs.shape.dtype, dims), [lhs, rhs], **attrs)

    def reduce(self, x: Instruction, dims: Sequence[int], kind: str) -> Instruction:
        """Reduce ``x`` over ``dims`` with ``kind`` in add/max/min/mul/and/or (dims removed)."""
        dims = tuple(sorted(int(d) for d in dims))
        if not dims:
            return x
        dtype = x.shape.dtype
        init = self.scalar(reduction_identity(kind, dtype), dtype)
        out = [d for i, d in enumerate(x.shape.dims) if i not in dims]
        return self.emit("reduce", Shape.array(dtype, out), [x, init], dimensions=dims,
                         to_apply=self._reducer(kind, dtype))

    def _reducer(self, kind: str, dtype: str) -> Computation:
        key = (kind, dtype)
        if key not in self._reducers:
            scalar = Shape.array(dtype, ())
            comp = Computation(self.module.unique_name(f"{kind}_{dtype}"))
            a = Instruction(self.module.unique_name("lhs"), "parameter", scalar, parameter_number=0)
            b = Instruction(self.module.unique_name("rhs"), "parameter", scalar, parameter_number=1)
            out = Instruction(self.module.unique_name(_REDUCERS[kind]), _REDUCERS[kind], scalar, [a, b])
            for inst in (a, b, out):
                comp.add(inst)
            comp.root = out
            self._reducers[key] = self.module.add_computation(comp)
        return self._reducers[key]

    def reduce_window(self, x: Instruction, window: Window, kind: str) -> Instruction:
        """XLA reduce-window of ``x`` with ``kind`` (add/max/min/mul) and its identity as init value
        (padding contributes nothing: the interpreter and XLA's evaluator skip padded positions)."""
        dtype = x.shape.dtype
        init = self.scalar(reduction_identity(kind, dtype), dtype)
        return self.emit_inferred("reduce-window", [x, init], window=window, to_apply=self._reducer(kind, dtype))

    def reduce_variadic(self, inputs: Sequence[Instruction], inits: Sequence[Instruction], dims: Sequence[int],
                        reducer: Computation) -> list[Instruction]:
        """A reduce of several inputs with one combiner (e.g. argmax's (value, index) pairs)."""
        out = self.emit_inferred("reduce", [*inputs, *inits], dimensions=tuple(sorted(int(d) for d in dims)),
                                 to_apply=reducer)
        return [self.emit("get-tuple-element", s, [out], index=i) for i, s in enumerate(out.shape.tuple_shapes)]

    def gather(self, x: Instruction, indices: Instruction, *, offset_dims: Sequence[int],
               collapsed_slice_dims: Sequence[int], start_index_map: Sequence[int], index_vector_dim: int,
               slice_sizes: Sequence[int]) -> Instruction:
        """XLA gather (attribute meanings as in hlo/shape_inference.py)."""
        return self.emit_inferred(
            "gather", [x, indices], offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed_slice_dims),
            start_index_map=tuple(start_index_map), index_vector_dim=int(index_vector_dim),
            slice_sizes=tuple(int(s) for s in slice_sizes))

    def tuple(self, items: Sequence[Instruction]) -> Instruction:
        return self.emit("tuple", Shape.tuple_of(i.shape for i in items), items)


def _hlo_of_numpy(dtype: np.dtype) -> str:
    try:
        return hlo_dtype_of(np.dtype(dtype))
    except KeyError:
        raise LoweringError(f"constant of numpy dtype {dtype} has no HLO equivalent") from None
