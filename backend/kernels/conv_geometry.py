"""Spatial geometry shared by the windowed kernels (convolution, reduce-window).

Feature maps sit on chip as [channels (partitions) x images x rows x W] with W the innermost free dim.
Work is cut into *blocks* of output pixels (images x rows x columns, at most `limit` of them: one PSUM
bank for a matmul) and blocks into *bands*: the input rows one SBUF tile holds for consecutive blocks
of the same images. A band covers *virtual* input rows (window coordinates: row -1 is the first row of
low padding): rows outside the input are zero rows on chip, so a tap's rows never need clipping, while
its columns are clipped (`Axis.valid`) so that no column padding is ever stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from backend.alloc import Tile
from backend.emit import ProgramBuilder
from backend.layout import simplify_pattern as simplify
from isa.program import AccessPattern

Pattern = tuple[tuple[int, int], ...]
COPY_CHUNK = 16384  # max free elements of one on-chip copy or memset
DMA_PIECE = 16 * 1024  # bytes per transfer of input rows, weights and output blocks: many queues in flight


def simplified(ap: AccessPattern) -> AccessPattern:
    return replace(ap, pattern=simplify(ap.pattern))


def fill(b: ProgramBuilder, tile: Tile, dtype: str, parts: int, size: int, value: float, comment: str) -> None:
    """Set the first `size` elements of `tile` on `parts` partitions to `value`."""
    for s in range(0, size, COPY_CHUNK):
        b.emit("dve", "memset", comment, {"value": value}, dst=tile.flat(dtype, parts, min(COPY_CHUNK, size - s), s))


def copy(b: ProgramBuilder, dst: Tile, src: Tile, dst_dtype: str, src_dtype: str, parts: int, size: int,
         comment: str) -> None:
    """Copy (and convert) the first `size` elements of `src` into `dst` on the least loaded engines."""
    for s in range(0, size, COPY_CHUNK):
        n = min(COPY_CHUNK, size - s)
        b.copy(dst.flat(dst_dtype, parts, n, s), src.flat(src_dtype, parts, n, s), comment,
               engines=("act", "dve", "pool"))


@dataclass(frozen=True)
class Axis:
    """One spatial dimension of a window: `size` input positions, `out` outputs, `taps` window taps;
    output o, tap k reads input o * stride + k * dilation - pad."""

    size: int
    out: int
    taps: int
    stride: int = 1
    dilation: int = 1
    pad: int = 0

    def offset(self, tap: int) -> int:
        return tap * self.dilation - self.pad

    def valid(self, tap: int, o0: int, on: int) -> tuple[int, int]:
        """Outputs [lo, hi) within [o0, o0 + on) whose input under `tap` lies inside [0, size)."""
        off = self.offset(tap)
        lo = max(o0, -(off // self.stride))  # ceil(-off / stride)
        hi = min(o0 + on, (self.size - 1 - off) // self.stride + 1)
        return lo, max(lo, hi)

    def span(self, o0: int, on: int) -> tuple[int, int]:
        """Virtual input rows [lo, hi) that outputs [o0, o0 + on) read over all taps."""
        return o0 * self.stride - self.pad, (o0 + on - 1) * self.stride + self.offset(self.taps - 1) + 1


@dataclass(frozen=True)
class Block:
    """Output pixels: images [b0, b0 + nb) x rows [r0, r0 + nr) x columns [c0, c0 + nc)."""

    b0: int
    nb: int
    r0: int
    nr: int
    c0: int
    nc: int

    @property
    def size(self) -> int:
        return self.nb * self.nr * self.nc


@dataclass(frozen=True)
class Band:
    """The input rows one on-chip tile holds: images [b0, b0 + nb), virtual rows [v0, v0 + nv)."""

    b0: int
    nb: int
    v0: int
    nv: int
    blocks: tuple[Block, ...]

    def row(self, v: int) -> int:
        """Tile row of virtual input row `v`."""
        return v - self.v0


def _even(total: int, most: int) -> list[tuple[int, int]]:
    """[start, count) pieces of `total` of at most `most` each, as equal as possible."""
    n = -(-total // most)
    step = -(-total // n)
    return [(s, min(step, total - s)) for s in range(0, total, step)]


def plan_bands(batch: int, rows: Axis, cols: Axis, limit: int, fits: Callable[[int, int], bool]) -> list[Band]:
    """Blocks of at most `limit` output pixels, grouped into bands whose tiles satisfy
    `fits(images, virtual rows)`. Whole images share a block when one image is small; otherwise a
    block is a run of full rows (or a piece of one row when a row alone is over the limit)."""
    per_image = rows.out * cols.out
    lo, hi = rows.span(0, rows.out)
    whole = hi - lo
    if per_image <= limit and fits(1, whole):
        nb = max(1, min(batch, limit // per_image))
        while nb > 1 and not fits(nb, whole):
            nb -= 1
        return [Band(b0, n, lo, whole, (Block(b0, n, 0, rows.out, 0, cols.out),))
                for b0, n in _even(batch, nb)]
    if cols.out <= limit:
        per_block = max(1, min(rows.out, limit // cols.out))
        while per_block > 1 and not fits(1, _rows_needed(rows, per_block)):  # a block's rows must fit a tile
            per_block -= 1
        row_blocks = [(r0, nr, 0, cols.out) for r0, nr in _even(rows.out, per_block)]
    else:
        row_blocks = [(r, 1, c0, nc) for r in range(rows.out) for c0, nc in _even(cols.out, limit)]
    bands: list[Band] = []
    for b in range(batch):
        current: list[tuple[int, int, int, int]] = []
        for blk in row_blocks:
            trial = current + [blk]
            v0, v1 = rows.span(trial[0][0], trial[-1][0] + trial[-1][1] - trial[0][0])
            if current and not fits(1, v1 - v0):
                bands.append(_band(b, current, rows))
                trial = [blk]
            current = trial
        if current:
            bands.append(_band(b, current, rows))
    return bands


def _rows_needed(rows: Axis, per_block: int) -> int:
    """The most virtual input rows a block of `per_block` output rows reads."""
    return (per_block - 1) * rows.stride + rows.offset(rows.taps - 1) - rows.offset(0) + 1


def _band(b: int, blocks: list[tuple[int, int, int, int]], rows: Axis) -> Band:
    r0 = blocks[0][0]
    v0, v1 = rows.span(r0, blocks[-1][0] + blocks[-1][1] - r0)
    return Band(b, 1, v0, v1 - v0, tuple(Block(b, 1, r, nr, c0, nc) for r, nr, c0, nc in blocks))


def band_pieces(band: Band, rows: Axis) -> list[tuple[int, int]]:
    """Tile rows of `band` split where its blocks' needs begin: [start, end) in block order (loads in
    these pieces let the first blocks start before the whole band has arrived)."""
    pieces, done = [], 0
    for blk in band.blocks:
        _, hi = rows.span(blk.r0, blk.nr)
        end = band.nv if blk is band.blocks[-1] else min(band.nv, band.row(hi))
        if end > done:
            pieces.append((done, end))
            done = end
    return pieces
