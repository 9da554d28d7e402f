"""Materialized transposes on PE: a copy whose source and destination are contiguous along different axes.

Reading the source along the destination's minor axis would take one DMA descriptor per element. Instead,
with `a` the destination's contiguous axis and `b` the source's:

    load   S[a-block (<= 128 partitions), b-chunk]   rows of the source, contiguous along b
    PE     transpose each 128 x 128 block of S into PSUM (four blocks per bank)
    ACT/DVE evacuate PSUM -> SBUF (converting to the destination dtype)
    store  [b-block (partitions), a-block]           rows of the destination, contiguous along a

Every other axis is looped over. PE transposes floating-point data (f32, bf16, f16) exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from backend.alloc import PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.operands import PSUM_SLOT
from backend.layout import View, itemsize

PE_DTYPES = ("f32", "bf16", "f16")
CHUNK = 512  # source columns loaded per DMA (four blocks of 128)


def transposed_axes(src: View, out: View) -> tuple[int, int] | None:
    """(a, b): the destination's and the source's unit-stride axes when they differ, else None."""
    a = next((d for d in range(out.rank) if out.strides[d] == 1 and out.dims[d] > 1), None)
    b = next((d for d in range(src.rank) if src.strides[d] == 1 and src.dims[d] > 1), None)
    if a is None or b is None or a == b or src.strides[a] == 0 or out.strides[b] == 0:
        return None
    return a, b


def can_transpose(src: View, out: View) -> bool:
    return (src.cast is None and src.stored_dtype in PE_DTYPES and out.dtype in PE_DTYPES
            and transposed_axes(src, out) is not None)


def transpose_kernel(builder: ProgramBuilder, src: View, out: View, name: str, where: str) -> None:
    axes = transposed_axes(src, out)
    assert axes is not None
    a, b = axes
    parts = builder.target.partitions
    A, B = src.dims[a], src.dims[b]
    stored = src.stored_dtype
    chunk = min(CHUNK, B)
    loops = [d for d in range(src.rank) if d not in (a, b)]
    specs = [PoolSpec("rows", "sbuf", chunk * itemsize(stored), 3),
             PoolSpec("cols", "sbuf", parts * itemsize(out.dtype), 8),
             PoolSpec("tpsum", "psum", 0, 2)]
    pools = builder.alloc.begin_kernel(name, specs, where)
    builder.place(src)
    for idx in itertools.product(*(range(src.dims[d]) for d in loops)):
        fixed = dict(zip(loops, idx, strict=True))
        for a0 in range(0, A, parts):
            aw = min(parts, A - a0)
            for c0 in range(0, B, chunk):
                cw = min(chunk, B - c0)
                label = f"{name}[{','.join(map(str, idx))}{',' if idx else ''}{a0},{c0}]"
                rows = pools["rows"].next().flat(stored, aw, cw)
                builder.dma(rows, src.hbm_ap(a, a0, aw, [(b, c0, cw)], fixed), f"{label} load rows")
                bank = pools["tpsum"].next()
                blocks = [(j, min(parts, cw - j)) for j in range(0, cw, parts)]
                for slot, (j, bw) in enumerate(blocks):
                    block = replace(rows, offset=rows.offset + j * rows.itemsize, pattern=((1, bw),))
                    builder.emit("pe", "transpose", f"{label} transpose",
                                 dst=bank.ap("f32", bw, [(1, aw)], slot * PSUM_SLOT), src=block)
                for slot, (j, bw) in enumerate(blocks):
                    cols = pools["cols"].next().flat(out.dtype, bw, aw)
                    builder.copy(cols, bank.ap("f32", bw, [(1, aw)], slot * PSUM_SLOT), f"{label} evacuate")
                    builder.dma(out.hbm_ap(b, c0 + j, bw, [(a, a0, aw)], fixed), cols, f"{label} store")
    builder.alloc.end_kernel()
