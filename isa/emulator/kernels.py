"""Numerics of every opcode: a builder per opcode turns a decoded instruction into a ``run`` closure.

Builders run once per instruction at decode time; they resolve attributes, pick the readers and
the rounding store, and close over pre-built numpy views, so executing an instruction is a handful
of whole-tile numpy calls with no per-element Python. Engine state that outlives one instruction
(PE's stationary tile, ACT's accumulator registers) lives in ``EngineState``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from isa.dtypes import dtype as lookup_dtype
from isa.emulator.numerics import (
    ACTIVATIONS,
    ALU,
    COMPARE,
    INT_ALU,
    REDUCE,
    int_width,
    make_store,
    read_f32,
    read_int,
    store_wrapped,
    wrap64,
)
from isa.emulator.pe import DiagonalTile, diagonal_product, diagonal_tile
from isa.errors import ProgramError
from isa.instructions import CONTROL_OPCODES, NO_OP, OPCODES, reduce_axes
from isa.program import Instruction

Runner = Callable[[], None]
F32 = np.float32


class EngineState:
    """State kept by the engines between instructions: PE's stationary tile as fp32 [K, M] and
    ACT's per-partition fp32 accumulator registers (zero at start)."""

    def __init__(self, partitions: int) -> None:
        self.stationary = np.zeros((0, 0), dtype=F32)  # the stationary tile, [K, M]
        # its transpose, [M, K], C-contiguous (None until a product needs it: most take a view, see VIEW_COLUMNS)
        self.stationary_t: np.ndarray | None = None
        self.diagonal: DiagonalTile | None = None  # the tile when it is diagonal (isa.emulator.pe)
        self.act_acc = np.zeros((partitions, 1), dtype=F32)
        # scratch arrays by (shape, dtype), shared by the instructions that need one for the duration of
        # their run (instructions run one at a time): one buffer instead of one per instruction
        self.scratch: dict[tuple[tuple[int, ...], str], np.ndarray] = {}

    def buffer(self, shape: tuple[int, ...], dtype: type = F32) -> np.ndarray:
        """A scratch array of ``shape`` and ``dtype``, shared with every other caller asking for the same."""
        key = (shape, np.dtype(dtype).str)
        array = self.scratch.get(key)
        if array is None:
            array = self.scratch[key] = np.empty(shape, dtype=dtype)
        return array


@dataclass
class Ctx:
    """What a numerics builder needs: the instruction, the views of its operands, the engine state."""

    inst: Instruction
    views: dict[str, np.ndarray]
    state: EngineState

    def attr(self, name: str) -> int | float | str:
        """The attribute's value, or its default from the opcode table."""
        if name in self.inst.attrs:
            return self.inst.attrs[name]
        for a in OPCODES[self.inst.opcode].attrs:
            if a.name == name:
                return a.default
        raise KeyError(name)

    def store(self, name: str = "dst") -> Callable[[np.ndarray, np.ndarray], None]:
        return make_store(self.inst.operands[name].dtype)

    def integer_mode(self) -> bool:
        """GpSimd's exact integer mode (``math=int``): POOL only, every operand an integer type or pred."""
        if self.inst.attrs.get("math", "fp32") != "int":
            return False
        where = f"{self.inst.engine}.{self.inst.opcode} (line {self.inst.line})"
        if self.inst.engine != "pool":
            raise ProgramError(f"{where}: math=int is GpSimd's (pool) integer mode")
        bad = [n for n, ap in self.inst.operands.items() if not lookup_dtype(ap.dtype).is_integer]
        if bad:
            raise ProgramError(f"{where}: math=int needs integer operands; {', '.join(bad)} are not")
        return True

    def same_dtype(self, *names: str) -> bool:
        """Whether the named operands all share one dtype (data can move without conversion)."""
        return len({self.inst.operands[n].dtype for n in names}) == 1


def _flat(view: np.ndarray) -> np.ndarray:
    return view.reshape(view.shape[0], -1)


def _nop(ctx: Ctx) -> Runner:
    return lambda: None


# PE -------------------------------------------------------------------------------------------

def _load_stationary(ctx: Ctx) -> Runner:
    src, state = ctx.views["src"], ctx.state

    def run() -> None:
        # the upcast copy first: a transposing copy straight from SBUF (rows 192 KiB apart) is 20x slower
        stationary = state.stationary = read_f32(src)
        state.diagonal = diagonal_tile(stationary)  # a diagonal tile's products are elementwise (isa.emulator.pe)
        state.stationary_t = None  # the contiguous transpose, made when a product needs it (see _multiply_moving)

    return run


# Column counts of the moving tile for which OpenBLAS gives the same bits whether the stationary tile's
# transpose is a view or a contiguous copy (its kernels then sum each product in the same order; for other
# counts, e.g. 1-15 or 17 columns, another kernel sums in another order): the view saves the transposing copy,
# which cost more than a 128x128x128 product. tests/isa/test_emulator_pe.py holds both to the same bits.
VIEW_COLUMNS = 16

# MACs per BLAS call: OpenBLAS runs smaller GEMMs on one thread. Bigger ones spawn threads, and
# on a small shared machine (2 cores, parallel test workers) oversubscribed BLAS threads make a
# 128x128x512 product 20-100x slower than a few single-threaded calls.
BLAS_CHUNK_MACS = 1 << 18


def _view_2d(view: np.ndarray, m: int, n: int) -> np.ndarray | None:
    """``view`` as [m, n] without a copy, or None when its strides do not allow it."""
    flat = view.view()
    try:
        flat.shape = (m, n)
    except AttributeError:
        return None
    return flat


def _contiguous_t(state: EngineState) -> np.ndarray:
    """The stationary tile's transpose as a C-contiguous array, made once per tile."""
    if state.stationary_t is None:
        state.stationary_t = np.ascontiguousarray(state.stationary.T)
    return state.stationary_t


def _multiply_moving(ctx: Ctx) -> Runner:
    dst, src, state = ctx.views["dst"], ctx.views["src"], ctx.state
    acc = bool(ctx.attr("acc"))
    m, n = dst.shape[0], _flat(src).shape[1]
    k = src.shape[0]
    step = max(1, BLAS_CHUNK_MACS // max(1, k * m))
    # The chunks of ``step`` columns as one stacked matmul: numpy makes the same BLAS call per
    # chunk as a loop would (same shapes and strides, so the same bits), without the loop.
    whole = n - n % step
    chunks = whole // step
    chunks_take_view = step % VIEW_COLUMNS == 0
    dst_2d = _view_2d(dst, m, n)
    in_place = dst_2d is not None
    # without accumulation the products go straight to PSUM (BLAS writes them through its ldc)
    direct = in_place and not acc and dst.dtype == F32 and dst_2d.strides[1] == dst.itemsize
    product = dst_2d if direct else state.buffer((m, n))
    product_chunks = product[:, :whole].reshape(m, chunks, step).transpose(1, 0, 2)
    # a diagonal stationary tile (depthwise convolutions) multiplies the moving tile elementwise
    bits = state.buffer((k, n), np.uint32)

    def run() -> None:
        diagonal = state.diagonal
        if diagonal is None or not diagonal_product(diagonal, read_f32(src), product, bits):
            _blas()
        if direct:
            return
        if acc and in_place:
            np.add(product, dst_2d, out=dst_2d)
        elif acc:
            dst[...] = (product + dst.reshape(m, n)).reshape(dst.shape)
        else:
            dst[...] = product.reshape(dst.shape)

    def _blas() -> None:
        # exact upcast, fp32 products accumulated in fp32; a copy even for fp32: BLAS packs an operand whose rows
        # lie a partition (192 KiB) apart at half the speed
        moving = read_f32(src)
        if chunks:
            np.matmul(state.stationary.T if chunks_take_view else _contiguous_t(state),
                      moving[:, :whole].reshape(k, chunks, step).transpose(1, 0, 2), out=product_chunks)
        if whole < n:
            np.matmul(_contiguous_t(state), moving[:, whole:], out=product[:, whole:])

    return run


def _transpose(ctx: Ctx) -> Runner:
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()
    return lambda: store(dst, read_f32(src).T)


# ACT ------------------------------------------------------------------------------------------

def _activation(ctx: Ctx) -> Runner:
    v = ctx.views
    dst, src, bias, scale_vec, acc = v["dst"], v["src"], v.get("bias"), v.get("scale_vec"), v.get("acc")
    func, store = ACTIVATIONS[ctx.attr("func")], ctx.store()
    scale = F32(ctx.attr("scale"))
    cmd = ctx.attr("acc_cmd")
    p0 = ctx.inst.operands["src"].start_partition
    registers = ctx.state.act_acc[p0:p0 + src.shape[0]]
    store_acc = ctx.store("acc") if acc is not None else None

    def run() -> None:
        x = read_f32(src)
        if scale_vec is not None:
            x = x * read_f32(scale_vec)
        elif scale != 1:
            x = x * scale
        if bias is not None:
            x = x + read_f32(bias)
        y = func(x)
        store(dst, y)
        if cmd in ("reset", "reset_reduce"):
            registers[...] = 0
        if cmd in ("reduce", "reset_reduce"):
            registers[...] += np.sum(y, axis=1, dtype=F32, keepdims=True)
        if store_acc is not None:
            store_acc(acc, registers)

    return run


# DVE / POOL elementwise -----------------------------------------------------------------------

def _alu_reader(op: str) -> Callable[[np.ndarray], np.ndarray]:
    return read_int if ALU[op][0] == "int" else read_f32


def _in_domain(op: str, values: np.ndarray) -> np.ndarray:
    """An intermediate result as the operand domain of ``op`` wants it (int64 or fp32)."""
    if ALU[op][0] == "int":
        return values if values.dtype.kind in "iu" else np.trunc(values.astype(np.float64)).astype(np.int64)
    return values.astype(F32, copy=False)


def _int_scalar(ctx: Ctx, attr: str, vector: str) -> Callable[[], np.ndarray | np.generic]:
    view = ctx.views.get(vector)
    if view is not None:
        return lambda: read_int(view)
    value = ctx.attr(attr)
    if float(value) != int(value):
        raise ProgramError(f"{ctx.inst.engine}.{ctx.inst.opcode} (line {ctx.inst.line}): {attr}={value} is not an "
                           f"integer, and the operands are integers (GpSimd's integer mode)")
    exact = wrap64(int(value) + int(ctx.attr(f"i{attr}")))  # the integer part beyond fp64's 2^53 (isa.md)
    return lambda: exact


def _int_alu(ctx: Ctx) -> Runner:
    """tensor_tensor / tensor_scalar in GpSimd's exact integer mode."""
    first = "a" if "a" in ctx.views else "src"
    bits, signed = int_width(ctx.inst.operands[first].dtype)
    dst, src, store = ctx.views["dst"], ctx.views[first], store_wrapped(ctx.inst.operands["dst"].dtype)
    fn0 = INT_ALU[ctx.attr("op")]
    if ctx.inst.opcode == "tensor_tensor":
        b = ctx.views["b"]
        return lambda: store(dst, fn0(read_int(src), read_int(b), bits, signed))
    scalar0 = _int_scalar(ctx, "scalar", "scalar_vec")
    op1 = ctx.attr("op1")
    if op1 == NO_OP:
        return lambda: store(dst, fn0(read_int(src), scalar0(), bits, signed))
    fn1 = INT_ALU[op1]
    scalar1 = _int_scalar(ctx, "scalar1", "scalar1_vec")
    return lambda: store(dst, fn1(fn0(read_int(src), scalar0(), bits, signed), scalar1(), bits, signed))


# fp32 ALU ops whose every result is the correctly rounded one (IEEE basic operations): the same bits whatever
# loop numpy runs them in, so they may run on the operands' views (strided, broadcast) with no fp32 copies
EXACT_F32 = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide}


def _same_f32_views(*views: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """The views as arrays of one shape, without copies, when all are fp32 ([P, F] if their shapes differ);
    None otherwise."""
    if any(v.dtype != F32 for v in views):
        return None
    if all(v.shape == views[0].shape for v in views):
        return views
    flat = tuple(_view_2d(v, v.shape[0], v.size // max(1, v.shape[0])) for v in views)
    if any(f is None for f in flat) or any(f.shape != flat[0].shape for f in flat):
        return None
    return flat


def _tensor_tensor(ctx: Ctx) -> Runner:
    if ctx.integer_mode():
        return _int_alu(ctx)
    dst, a, b = ctx.views["dst"], ctx.views["a"], ctx.views["b"]
    op = ctx.attr("op")
    direct = _same_f32_views(dst, a, b) if op in EXACT_F32 else None
    if direct is not None:
        exact, (d, x, y) = EXACT_F32[op], direct
        return lambda: exact(x, y, out=d)
    fn, read, store = ALU[op][1], _alu_reader(op), ctx.store()
    return lambda: store(dst, fn(read(a), read(b)))


def _scalar_operand(ctx: Ctx, op: str, attr: str, vector: str) -> Callable[[], np.ndarray | np.generic]:
    """The scalar of one tensor_scalar stage: the [P, 1] vector operand if given, else the immediate."""
    view = ctx.views.get(vector)
    if view is not None:
        read = _alu_reader(op)
        return lambda: read(view)
    value = np.int64(ctx.attr(attr)) if ALU[op][0] == "int" else F32(ctx.attr(attr))
    return lambda: value


def _exact_immediate(ctx: Ctx, op: str, attr: str, vector: str) -> np.float32 | None:
    """The stage's fp32 immediate when the stage may run on views (EXACT_F32, not NaN: a NaN operand's payload
    could depend on the loop), else None."""
    if op not in EXACT_F32 or vector in ctx.views:
        return None
    value = F32(ctx.attr(attr))
    return None if np.isnan(value) else value


def _tensor_scalar_direct(ctx: Ctx) -> Runner | None:
    """fp32 tensor_scalar of exact stages with immediates, on the views (see EXACT_F32), or None."""
    dst, src = ctx.views["dst"], ctx.views["src"]
    op0, op1 = str(ctx.attr("op")), str(ctx.attr("op1"))
    direct = _same_f32_views(dst, src)
    scalar0 = _exact_immediate(ctx, op0, "scalar", "scalar_vec")
    if direct is None or scalar0 is None:
        return None
    (d, x), fn0 = direct, EXACT_F32[op0]
    if op1 == NO_OP:
        return lambda: fn0(x, scalar0, out=d)
    scalar1 = _exact_immediate(ctx, op1, "scalar1", "scalar1_vec")
    if scalar1 is None:
        return None
    fn1, tmp = EXACT_F32[op1], ctx.state.buffer(d.shape)

    def run() -> None:
        fn1(fn0(x, scalar0, out=tmp), scalar1, out=d)

    return run


def _tensor_scalar(ctx: Ctx) -> Runner:
    if ctx.integer_mode():
        return _int_alu(ctx)
    direct = _tensor_scalar_direct(ctx)
    if direct is not None:
        return direct
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()
    op0, op1 = ctx.attr("op"), ctx.attr("op1")
    fn0, read = ALU[op0][1], _alu_reader(op0)
    scalar0 = _scalar_operand(ctx, op0, "scalar", "scalar_vec")
    if op1 == NO_OP:
        return lambda: store(dst, fn0(read(src), scalar0()))
    fn1 = ALU[op1][1]
    scalar1 = _scalar_operand(ctx, op1, "scalar1", "scalar1_vec")
    return lambda: store(dst, fn1(_in_domain(op1, fn0(read(src), scalar0())), scalar1()))


def _tensor_copy(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    store = make_store(ctx.inst.operands["dst"].dtype, str(ctx.attr("round")))
    if ctx.same_dtype("dst", "src"):
        return lambda: dst.__setitem__(Ellipsis, src.reshape(dst.shape))
    if ctx.integer_mode():
        wrap = store_wrapped(ctx.inst.operands["dst"].dtype)
        return lambda: wrap(dst, read_int(src))
    if src.dtype.kind in "iu":
        return lambda: store(dst, read_int(src))
    return lambda: store(dst, read_f32(src))


def _select(ctx: Ctx) -> Runner:
    dst, pred, a, b = (ctx.views[n] for n in ("dst", "pred", "a", "b"))
    if ctx.same_dtype("dst", "a", "b"):
        def run_exact() -> None:
            dst[...] = np.where(_flat(pred) != 0, _flat(a), _flat(b)).reshape(dst.shape)

        return run_exact
    store = ctx.store()
    return lambda: store(dst, np.where(_flat(pred) != 0, read_f32(a), read_f32(b)))


def _memset(ctx: Ctx) -> Runner:
    dst, store = ctx.views["dst"], ctx.store()
    dtype = ctx.inst.operands["dst"].dtype
    value = ctx.attr("value")
    np_dtype = lookup_dtype(dtype).numpy
    if np_dtype.kind in "iu" and float(value) == int(value):  # exact: value + ivalue, saturated to the type
        info = np.iinfo(np_dtype)
        exact = min(max(int(value) + int(ctx.attr("ivalue")), int(info.min)), int(info.max))
        full_int = np.full(dst.shape, exact, dtype=np_dtype)
        return lambda: dst.__setitem__(Ellipsis, full_int)
    exact = lookup_dtype(dtype).is_integer  # a fractional value into an integer type: rounded, saturated
    full = np.full(dst.shape, value, dtype=np.float64 if exact else F32)
    return lambda: store(dst, full)


@lru_cache(maxsize=256)
def _affine(shape: tuple[int, ...], offset: int, channel: int, free: int) -> np.ndarray:
    """offset + channel * p + free * i as int64 [P, F] (p: partition, i: flat free index), read-only;
    cached since compiled programs repeat the same masks and ramps tile after tile."""
    parts, size = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    values = offset + channel * np.arange(parts, dtype=np.int64)[:, None] + free * np.arange(size, dtype=np.int64)
    values.flags.writeable = False
    return values


@lru_cache(maxsize=256)
def _affine_mask(shape: tuple[int, ...], offset: int, channel: int, free: int, cmp: str) -> np.ndarray:
    keep = COMPARE[cmp](_affine(shape, offset, channel, free), 0)
    keep.flags.writeable = False
    return keep


def _iota(ctx: Ctx) -> Runner:
    dst, store = ctx.views["dst"], ctx.store()
    values = _affine(dst.shape, ctx.attr("base"), ctx.attr("channel_multiplier"), 1)
    return lambda: store(dst, values)


def _affine_select(ctx: Ctx) -> Runner:
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()
    keep = _affine_mask(dst.shape, ctx.attr("offset"), ctx.attr("channel_multiplier"), ctx.attr("free_multiplier"),
                        ctx.attr("cmp"))
    fill = np.empty(1, dtype=dst.dtype)
    store(fill, np.array([ctx.attr("fill")], dtype=F32))  # the fill rounded into dst's dtype
    fill = fill[0]
    if ctx.same_dtype("dst", "src"):
        return lambda: dst.__setitem__(Ellipsis, np.where(keep, _flat(src), fill).reshape(dst.shape))
    fill_f32 = fill.astype(F32)
    return lambda: store(dst, np.where(keep, read_f32(src), fill_f32))


# reductions, transposes, statistics -----------------------------------------------------------

def _tensor_reduce(ctx: Ctx) -> Runner:
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()
    axes = tuple(1 + a for a in reduce_axes(ctx.attr("axes"), src.ndim - 1))
    fn = REDUCE[ctx.attr("op")]
    return lambda: store(dst, fn(src.astype(F32), axes))


def _partition_reduce(ctx: Ctx) -> Runner:
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()
    fn = REDUCE[ctx.attr("op")]
    rows = dst.shape[0]
    return lambda: store(dst, np.broadcast_to(fn(read_f32(src), (0,))[None, :], (rows, _flat(src).shape[1])))


BLOCK = 32  # transpose32's block edge


def _transpose32(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    parts, free = _flat(src).shape

    def blocks(x: np.ndarray) -> np.ndarray:
        if parts <= BLOCK and free <= BLOCK:
            return x.T
        grid = x.reshape(parts // BLOCK, BLOCK, free // BLOCK, BLOCK)
        return grid.transpose(0, 3, 2, 1).reshape(parts, free)

    if ctx.same_dtype("dst", "src"):
        return lambda: dst.__setitem__(Ellipsis, blocks(_flat(src)).reshape(dst.shape))
    store = ctx.store()
    return lambda: store(dst, blocks(read_f32(src)))


def _moments(x: np.ndarray) -> list[np.ndarray]:
    """(count, mean, variance * count) per row of a float64 [P, n] array (zeros when n == 0)."""
    n = x.shape[1]
    if n == 0:
        zeros = np.zeros(x.shape[0])
        return [zeros, zeros, zeros]
    mean = x.mean(axis=1)
    return [np.full(x.shape[0], float(n)), mean, np.square(x - mean[:, None]).sum(axis=1)]


def _bn_stats(ctx: Ctx) -> Runner:
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()

    def run() -> None:
        x = read_f32(src).astype(np.float64)
        store(dst, np.stack([*_moments(x[:, 0::2]), *_moments(x[:, 1::2])], axis=1).astype(F32))

    return run


def _bn_aggr(ctx: Ctx) -> Runner:
    dst, src, store = ctx.views["dst"], ctx.views["src"], ctx.store()

    def run() -> None:
        triples = read_f32(src).astype(np.float64).reshape(src.shape[0], -1, 3)
        count, mean, m2 = triples[..., 0], triples[..., 1], triples[..., 2]
        total = count.sum(axis=1)
        safe = np.where(total > 0, total, 1.0)
        grand = (count * mean).sum(axis=1) / safe
        spread = m2.sum(axis=1) + (count * np.square(mean - grand[:, None])).sum(axis=1)
        variance = np.where(total > 0, spread / safe, np.nan)
        store(dst, np.stack([np.where(total > 0, grand, np.nan), variance], axis=1).astype(F32))

    return run


# DMA ------------------------------------------------------------------------------------------

def _dma(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    return lambda: dst.__setitem__(Ellipsis, src.reshape(dst.shape))


BUILDERS: dict[str, Callable[[Ctx], Runner]] = {
    "load_stationary": _load_stationary,
    "multiply_moving": _multiply_moving,
    "transpose": _transpose,
    "activation": _activation,
    "tensor_tensor": _tensor_tensor,
    "tensor_scalar": _tensor_scalar,
    "tensor_copy": _tensor_copy,
    "select": _select,
    "memset": _memset,
    "iota": _iota,
    "affine_select": _affine_select,
    "tensor_reduce": _tensor_reduce,
    "partition_reduce": _partition_reduce,
    "transpose32": _transpose32,
    "bn_stats": _bn_stats,
    "bn_aggr": _bn_aggr,
    "dma": _dma,
    "nop": _nop,
    # control flow: registers and branches act on the scheduler's state (isa.emulator.control)
    **{name: _nop for name in CONTROL_OPCODES},
}
