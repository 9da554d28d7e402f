"""The program builder: HBM tensors, constants, and instructions in program (dependency-safe) order.

Kernels call the typed helpers here (`dma`, `activation`, `tensor_tensor`, `matmul`...). Instructions
are appended without semaphores; `schedule.py` later orders each engine's stream and adds the waits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields

import numpy as np

from backend.alloc import Allocator, Tile
from backend.costs import CostModel
from backend.layout import Buffer, View, itemsize
from backend.options import BackendOptions
from backend.registry import KernelShape, kernel_options
from backend.residency import Image, ResidencyMismatch, Survey
from isa.dtypes import WIDE_INTEGERS, immediate
from isa.dtypes import dtype as isa_dtype
from isa.instructions import DMA_OPCODES, indirect_side, start_partition_allowed
from isa.program import AccessPattern, Instruction, Program
from isa.target import Target

PARTITION_GROUPS = (128, 64, 32, 16, 8, 4, 2, 1)  # partition counts of a DMA chunk (DMA has no start-partition rule)


class ProgramBuilder:
    """`images`: scratch tensors kept in SBUF (their DMAs are redirected); `survey`: records every DMA
    touching a scratch tensor (the first of the backend's two lowering passes)."""

    def __init__(self, target: Target, options: BackendOptions, images: list[Image] | None = None,
                 survey: Survey | None = None):
        self.target = target
        self.options = options  # a dot/conv kernel's own (kernel_options) while it is lowered
        self.base_options = options
        self.tiling: list[str] = []  # per dot/conv kernel: its shape and the tiling its policy chose
        self.program = Program(target=target.name)
        self.ops: list[Instruction] = []
        self.alloc = Allocator(target, lambda: len(self.ops), images, options.sbuf_budget_bytes)
        self.images = {i.tensor: i for i in images or []}
        self.survey = survey
        self.scratch_labels: dict[str, str] = {}  # scratch tensor -> the HLO value it holds
        self.hbm_traffic: dict[int, list[int]] = {}  # kernel index -> [bytes read, bytes written]
        self.layout_notes: list[str] = []
        self.costs = CostModel(target)
        self.engine_load: dict[str, float] = {e: 0.0 for e in ("pe", "act", "dve", "pool", "sp", "dma")}
        self.alloc.load_clock = lambda: dict(self.engine_load)  # per kernel, for the weights' plan
        self._n_const = 0
        self.const_memo: dict = {}  # arrays derived from constants (TiledConst layouts), shared by both lowerings
        self._n_scratch = 0
        self._identity: dict[str, Tile] = {}
        self._ones: dict[str, Tile] = {}
        self.useful_macs = 0
        self.origin = ""  # the HLO instruction being lowered: every emitted instruction is tagged with it

    @contextmanager
    def kernel_options(self, shape: KernelShape) -> Iterator[BackendOptions]:
        """While the kernel of `shape` is lowered, `self.options` are the ones the tile policy chose."""
        chosen = kernel_options(shape, self.base_options)
        changed = [f"{f.name}={getattr(chosen, f.name)}" for f in fields(chosen)
                   if getattr(chosen, f.name) != getattr(self.base_options, f.name)]
        tuned = any(key == shape.key for key, _ in self.base_options.tile_overrides)
        self.tiling.append(f"{shape.key}: {', '.join(changed) or 'default tiling'} (tile policy "
                           f"{self.base_options.tile_policy}{', autotuned' if tuned and changed else ''})")
        self.options = chosen
        try:
            yield chosen
        finally:
            self.options = self.base_options

    # -- HBM tensors ------------------------------------------------------------------------------------------
    def input_tensor(self, index: int, dtype: str, shape: tuple[int, ...]) -> View:
        name = f"in{index}"
        self.program.add_tensor(name, "input", dtype, shape)
        return View.of(Buffer(dtype, int(np.prod(shape, dtype=np.int64)), name), tuple(shape))

    def output_tensor(self, index: int, dtype: str, shape: tuple[int, ...]) -> View:
        name = f"out{index}"
        self.program.add_tensor(name, "output", dtype, shape)
        return View.of(Buffer(dtype, int(np.prod(shape, dtype=np.int64)), name), tuple(shape))

    def scratch(self, dtype: str, dims: tuple[int, ...], order: tuple[int, ...] | None = None,
                label: str = "") -> View:
        """A fresh scratch tensor holding `dims` (the HLO value `label`), stored with axes in `order`
        (major to minor): in HBM, or in SBUF when the residency plan keeps it there."""
        order = tuple(range(len(dims))) if order is None else order
        physical = tuple(dims[a] for a in order)
        name = f"s{self._n_scratch}"
        self._n_scratch += 1
        self.scratch_labels[name] = label
        self.program.add_tensor(name, "scratch", dtype, physical)
        return View.of(Buffer(dtype, int(np.prod(physical, dtype=np.int64)), name), tuple(dims), order)

    @staticmethod
    def const_view(array: np.ndarray, dtype: str) -> View:
        """An unplaced constant (placed in the program only if a kernel reads it)."""
        data = np.ascontiguousarray(array).astype(isa_dtype(dtype).numpy, copy=False)
        return View.of(Buffer(dtype, data.size, None, data), tuple(data.shape))

    def place(self, view: View) -> View:
        """Make sure the constant behind `view` is a program tensor; returns the view."""
        buf = view.buffer
        if buf.name is None:
            assert buf.data is not None
            buf.name = f"c{self._n_const}"
            self._n_const += 1
            data = buf.data if buf.data.ndim else buf.data.reshape(1)
            self.program.add_tensor(buf.name, "const", buf.dtype, tuple(data.shape))
            self.program.constants[buf.name] = data
        return view

    def new_const(self, array: np.ndarray, dtype: str) -> View:
        return self.place(self.const_view(array, dtype))

    # -- instructions -----------------------------------------------------------------------------------------
    def emit(self, engine: str, opcode: str, comment: str = "", attrs: dict | None = None,
             **operands: AccessPattern | None) -> Instruction:
        inst = Instruction(engine, opcode, {k: v for k, v in operands.items() if v is not None},
                           dict(attrs or {}), comment=comment, origin=self.origin)
        if opcode in DMA_OPCODES:
            self._route(inst)
        self.ops.append(inst)
        if engine != "sp":
            self.engine_load[engine] += self.costs.duration(inst)
        elif opcode in DMA_OPCODES:
            self.engine_load["dma"] += self.costs.transfer_ns(inst)
        return inst

    def _route(self, inst: Instruction) -> None:
        """Survey a DMA, or redirect its scratch side to the tensor's SBUF image; count HBM bytes."""
        kernel = self.alloc.kernel_index
        if self.survey is not None:
            self.survey.record(kernel, inst, self.scratch_labels.keys())
        indirect = indirect_side(inst.opcode, inst.attrs)
        for side in ("dst", "src"):
            ap = inst.operands[side]
            image = self.images.get(ap.tensor) if ap.memory == "hbm" else None
            if image is not None and side == indirect:
                raise ResidencyMismatch(image.tensor)  # rows picked at run time: the tensor stays in HBM
            if image is not None:
                moved = image.translate(ap)
                if moved is None:
                    raise ResidencyMismatch(image.tensor)
                inst.operands[side] = moved
        traffic = self.hbm_traffic.setdefault(kernel, [0, 0])
        for side, i in (("src", 0), ("dst", 1)):
            if inst.operands[side].memory == "hbm":
                traffic[i] += inst.operands[side].nbytes

    def staged_from(self, view: View) -> str | None:
        """The scratch tensor behind `view`, for PoolSpec.source (None for inputs and constants)."""
        name = view.buffer.name
        return name if name in self.scratch_labels else None

    def resident(self, ap: AccessPattern, compute: bool = True) -> AccessPattern | None:
        """The SBUF image access equal to the HBM access `ap` when its tensor is kept on chip (None
        otherwise); with `compute`, only if a compute engine may use it (start-partition rule)."""
        image = self.images.get(ap.tensor) if ap.memory == "hbm" else None
        moved = image.translate(ap) if image is not None else None
        if moved is None:
            return None
        if compute and not start_partition_allowed(moved.start_partition, moved.partitions):
            return None
        return moved

    def pick_engine(self, engines: tuple[str, ...]) -> str:
        """The least loaded (by estimated busy time so far) of `engines`."""
        return min(engines, key=lambda e: self.engine_load[e])

    def activation(self, dst: AccessPattern, src: AccessPattern, func: str = "identity", *,
                   bias: AccessPattern | None = None, scale: float = 1.0,
                   scale_vec: AccessPattern | None = None, acc: AccessPattern | None = None,
                   comment: str = "") -> Instruction:
        """dst = func(src * scale + bias); with `acc`, ACT's accumulator also sums the outputs per
        partition (reset first) and writes the sums to `acc` [P, 1]."""
        attrs: dict = {"func": func}
        if scale != 1.0:
            attrs["scale"] = float(scale)
        if acc is not None:
            attrs["acc_cmd"] = "reset_reduce"
        return self.emit("act", "activation", comment, attrs, dst=dst, src=src, bias=bias, scale_vec=scale_vec,
                         acc=acc)

    def _alu_engine(self, *aps: AccessPattern | None) -> str:
        if any(ap is not None and ap.dtype in WIDE_INTEGERS for ap in aps):
            return "pool"  # 64-bit integers: GpSimd only (docs/integer-semantics.md)
        return "dve" if any(ap is not None and ap.memory == "psum" for ap in aps) \
            else self.pick_engine(("dve", "pool"))

    def tensor_tensor(self, dst: AccessPattern, a: AccessPattern, b: AccessPattern, op: str,
                      comment: str = "") -> Instruction:
        return self.emit(self._alu_engine(dst, a, b), "tensor_tensor", comment, {"op": op}, dst=dst, a=a, b=b)

    def tensor_scalar(self, dst: AccessPattern, src: AccessPattern, op: str, scalar: float = 0.0,
                      comment: str = "", *, scalar_vec: AccessPattern | None = None, op1: str | None = None,
                      scalar1: float = 0.0, scalar1_vec: AccessPattern | None = None) -> Instruction:
        """dst = (src op scalar) op1 scalar1; a scalar is the immediate or the per-partition vector."""
        attrs: dict = {"op": op, "scalar": float(scalar)}
        if op1 is not None:
            attrs["op1"] = op1
            attrs["scalar1"] = float(scalar1)
        return self.emit(self._alu_engine(dst, src, scalar_vec, scalar1_vec), "tensor_scalar", comment, attrs,
                         dst=dst, src=src, scalar_vec=scalar_vec, scalar1_vec=scalar1_vec)

    def select(self, dst: AccessPattern, pred: AccessPattern, a: AccessPattern, b: AccessPattern,
               comment: str = "") -> Instruction:
        return self.emit(self._alu_engine(dst, pred, a, b), "select", comment, dst=dst, pred=pred, a=a, b=b)

    def tensor_reduce(self, dst: AccessPattern, src: AccessPattern, op: str, comment: str = "",
                      axes: str = "all") -> Instruction:
        attrs: dict = {"op": op}
        if axes != "all":
            attrs["axes"] = axes
        return self.emit("dve", "tensor_reduce", comment, attrs, dst=dst, src=src)

    def memset(self, dst: AccessPattern, value: float, comment: str = "") -> Instruction:
        exact = isa_dtype(dst.dtype).is_integer and math.isfinite(value) and value == int(value)
        attrs = immediate(int(value), "value") if exact else {"value": float(value)}
        return self.emit(self._alu_engine(dst), "memset", comment, attrs, dst=dst)

    def iota(self, dst: AccessPattern, base: int, channel_multiplier: int, comment: str = "",
             engine: str = "pool") -> Instruction:
        """dst[p, i] = base + channel_multiplier * p + i."""
        return self.emit(engine, "iota", comment, {"base": int(base), "channel_multiplier": int(channel_multiplier)},
                         dst=dst)

    def copy(self, dst: AccessPattern, src: AccessPattern, comment: str = "",
             engines: tuple[str, ...] = ("act", "dve")) -> Instruction:
        """dst = src with dtype conversion, on the least loaded allowed engine. Integers convert as XLA's
        convert does (docs/integer-semantics.md): ACT (fp32) never copies them; float -> integer truncates
        (round=zero); integer -> another integer type wraps on GpSimd (math=int)."""
        if "psum" in (dst.memory, src.memory):
            engines = tuple(e for e in engines if e != "pool")
        if WIDE_INTEGERS & {dst.dtype, src.dtype}:
            engines = ("pool",)  # 64-bit integers: GpSimd only (moves, converts)
        dst_int, src_int = isa_dtype(dst.dtype).is_integer, isa_dtype(src.dtype).is_integer
        if dst_int and src_int and dst.dtype != src.dtype and "psum" not in (dst.memory, src.memory):
            return self.emit("pool", "tensor_copy", comment, {"math": "int"}, dst=dst, src=src)
        if dst_int or src_int:
            engines = tuple(e for e in engines if e != "act") or ("dve",)
        if dst_int and not src_int:
            return self.emit(self.pick_engine(engines), "tensor_copy", comment, {"round": "zero"}, dst=dst, src=src)
        engine = self.pick_engine(engines)
        if engine == "act":
            return self.activation(dst, src, "copy", comment=comment)
        return self.emit(engine, "tensor_copy", comment, dst=dst, src=src)

    def load_stationary(self, src: AccessPattern, comment: str = "") -> Instruction:
        return self.emit("pe", "load_stationary", comment, src=src)

    def multiply_moving(self, dst: AccessPattern, src: AccessPattern, acc: bool, comment: str = "") -> Instruction:
        return self.emit("pe", "multiply_moving", comment, {"acc": int(acc)}, dst=dst, src=src)

    # -- DMA --------------------------------------------------------------------------------------------------
    def dma(self, dst: AccessPattern, src: AccessPattern, comment: str = "", split: int | None = None,
            min_run: int = 8192) -> None:
        """Copy src to dst, split into transfers of about `split` bytes (default: the option) when large,
        keeping contiguous runs of at least `min_run` bytes per partition (smaller runs pay the DMA
        descriptor overhead); the scheduler spreads them over the queues."""
        assert dst.partitions == src.partitions and dst.free_size == src.free_size, (dst, src)
        limit = split or self.options.dma_split_bytes
        per_partition = dst.free_size * dst.itemsize
        group = dst.partitions
        if dst.nbytes > limit and dst.partitions > 32:
            want = max(1, limit // max(1, per_partition))
            group = next((g for g in PARTITION_GROUPS if g <= want), 1)
        for p0 in range(0, dst.partitions, group):
            pn = min(group, dst.partitions - p0)
            d, s = _sub_partitions(dst, p0, pn), _sub_partitions(src, p0, pn)
            pieces = self._free_pieces(d, s, limit, min_run)
            for i0, n in pieces:
                dd, ss = (d, s) if len(pieces) == 1 else (_sub_outer(d, i0, n), _sub_outer(s, i0, n))
                self.emit("sp", "dma", comment, dst=dd, src=ss)

    @staticmethod
    def _free_pieces(dst: AccessPattern, src: AccessPattern, limit: int, min_run: int) -> list[tuple[int, int]]:
        """Split of the outermost free dim (same count on both sides) into pieces of about `limit` bytes,
        keeping at least `min_run` bytes contiguous per partition."""
        count = dst.pattern[0][1]
        if dst.nbytes <= limit or count < 2 or src.pattern[0][1] != count:
            return [(0, count)]
        inner_bytes = dst.nbytes // count // dst.partitions
        min_piece = max(1, -(-min_run // max(1, inner_bytes)))
        k = min(-(-dst.nbytes // limit), count // min_piece)
        if k < 2:
            return [(0, count)]
        step = -(-count // k)
        return [(i, min(step, count - i)) for i in range(0, count, step)]

    def ones(self, dtype: str) -> Tile:
        """A persistent [128, 1] column of ones in `dtype` (PE sums across partitions with it)."""
        if dtype not in self._ones:
            n = self.target.partitions
            tile = self.alloc.persistent(f"ones_{dtype}", itemsize(dtype))
            self.memset(tile.flat(dtype, n, 1), 1.0, f"ones {dtype}")
            self._ones[dtype] = tile
        return self._ones[dtype]

    # -- identity for PE transposes ---------------------------------------------------------------------------
    def identity(self, dtype: str) -> Tile:
        """A persistent [128, 128] identity matrix in `dtype`, built on chip with iota + is_equal."""
        if dtype not in self._identity:
            n = self.target.partitions
            ramp = self.alloc.persistent(f"iota_{dtype}", n * 4)
            tile = self.alloc.persistent(f"identity_{dtype}", n * itemsize(dtype))
            self.emit("pool", "iota", f"identity {dtype}: i - p", {"base": 0, "channel_multiplier": -1},
                      dst=ramp.flat("f32", n, n))
            self.emit("pool", "tensor_scalar", f"identity {dtype}: (i - p) == 0",
                      {"op": "is_equal", "scalar": 0.0}, dst=tile.flat(dtype, n, n), src=ramp.flat("f32", n, n))
            self._identity[dtype] = tile
        return self._identity[dtype]


# The two splits below build their AccessPattern directly (positional fields) rather than through
# dataclasses.replace, which checks every field by name: Llama's DMAs make ~560,000 of them.

# Each also hands its piece the sizes isa.program.AccessPattern derives and caches (free_shape, free_size,
# itemsize, nbytes), computed from the whole's as those properties would: every DMA piece's sizes are asked
# (HBM traffic, the split), and deriving them through the cached properties cost ~4 us a piece.

def _sub_partitions(ap: AccessPattern, p0: int, pn: int) -> AccessPattern:
    if p0 == 0 and pn == ap.partitions:
        return ap
    if ap.memory == "hbm":
        sub = AccessPattern(ap.memory, ap.dtype, ap.offset + p0 * ap.partition_stride * ap.itemsize, ap.pattern,
                            ap.start_partition, pn, ap.tensor, ap.partition_stride if pn > 1 else 0)
    else:
        sub = AccessPattern(ap.memory, ap.dtype, ap.offset, ap.pattern, ap.start_partition + p0, pn, ap.tensor,
                            ap.partition_stride)
    return _sized(sub, ap.free_shape, ap.free_size, ap.itemsize)


def _sub_outer(ap: AccessPattern, i0: int, n: int) -> AccessPattern:
    stride, _ = ap.pattern[0]
    sub = AccessPattern(ap.memory, ap.dtype, ap.offset + i0 * stride * ap.itemsize, ((stride, n), *ap.pattern[1:]),
                        ap.start_partition, ap.partitions, ap.tensor, ap.partition_stride)
    free_shape = (n, *ap.free_shape[1:])
    return _sized(sub, free_shape, math.prod(free_shape), ap.itemsize)


def _sized(ap: AccessPattern, free_shape: tuple[int, ...], free_size: int, itemsize: int) -> AccessPattern:
    ap.__dict__.update(free_shape=free_shape, free_size=free_size, itemsize=itemsize,
                       nbytes=ap.partitions * free_size * itemsize)
    return ap

