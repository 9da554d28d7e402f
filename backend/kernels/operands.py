"""Matmul operands: bringing a [K, C] view into SBUF with K (the contraction) on partitions.

The SBUF image of columns [c0, c0 + cn) is one buffer of [128 partitions x nK * cols] where K-tile kt
(rows kt*128 ...) occupies free elements [kt * cols + at, kt * cols + at + cn). How it gets there depends on the
view's strides (method chosen once per operand):
- "direct":    C is contiguous in HBM: one DMA per K-tile (rows of K on partitions).
- "cast":      as direct, into a staging tile of the stored dtype, then a converting copy (auto-cast).
- "transpose": K is contiguous (e.g. the model input x[M, K] as lhs): DMA row blocks [C-rows, K],
               cast if needed, then PE transposes each 128x128 block against an identity matrix
               (psum = block^T) and ACT/DVE copy PSUM -> SBUF, four blocks per PSUM bank.
- "strided":   small inputs, or neither axis contiguous: an element-wise strided DMA.
- "image":     the operand is a tensor kept on chip whose SBUF image already has K on the partitions
               (residency.py) in the compute dtype: nothing is loaded, matmuls read the image.
- "tiled":     a constant stored at compile time in the layout of its SBUF image (`TiledConst`): column
               blocks of the width the kernel loads, each [128 partitions x K-tiles x width] in the compute
               dtype, so a block is one DMA of one contiguous run per partition (two when K % 128 != 0);
               `group` blocks side by side per partition (K % 128 == 0) are one DMA whose runs are
               `group` times longer (each run pays the DMA descriptor overhead).
`load` returns a `Loaded`, which gives the access of any K-tile and columns.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.layout import View, itemsize
from isa.dtypes import dtype as isa_dtype
from isa.program import AccessPattern

PSUM_SLOT = 128  # fp32 columns of one transposed block in a PSUM bank


@dataclass(frozen=True)
class TiledConst:
    """A constant [batch..., K, C] operand laid out at compile time as its kernel reads it, in `buffer`
    (a placed flat constant view). Per batch (K * C elements each), column blocks of `block` columns (the
    last one narrower) follow each other; block j of width w holds rows [128 partitions][full K-tiles][w],
    then the last partial K-tile's [K % 128][w]. With `group` > 1 (only when K % 128 == 0), runs of
    `group` blocks (the last run shorter) are interleaved by partition instead: per partition the group's
    blocks one after the other, each [K-tiles][w], so that the group is one DMA of one contiguous run
    per partition, landing in SBUF exactly as `group` single-block loads side by side would."""

    buffer: View
    K: int
    C: int
    block: int
    parts: int
    base: int = 0  # elements: the batch's first block
    group: int = 1  # blocks per DMA

    @staticmethod
    def build(builder: ProgramBuilder, view: View, compute: str, block: int, group: int = 1) -> TiledConst:
        parts = builder.target.partitions
        *_, K, C = view.dims
        block = min(block, C)
        group = max(1, min(group, -(-C // block))) if K % parts == 0 else 1
        memo = builder.const_memo
        key = ("tiled", _data_key(view), compute, block, parts, group)
        if key not in memo:  # (the source array is kept with it, so that its address is not reused)
            memo[key] = (view.buffer.data, _tile_blocks(np.asarray(view.const_array()), compute, block, parts, group))
        flat = memo[key][1]
        return TiledConst(builder.new_const(flat, compute), K, C, block, parts, group=group)

    @property
    def span(self) -> int:
        """Columns of one DMA (a group of blocks)."""
        return self.block * self.group

    def batch(self, index: tuple[int, ...], dims: tuple[int, ...]) -> TiledConst:
        flat = 0
        for i, d in zip(index, dims, strict=True):
            flat = flat * d + i
        return replace(self, base=flat * self.K * self.C)

    def loads(self, c0: int, cn: int) -> list[tuple[int, int, int, int, int]]:
        """(first column, width, rows, element offset, partition stride) of the DMAs bringing columns
        [c0, c0 + cn) (whole blocks): per block group the requested blocks' full K-tiles (rows = 128: one
        run per partition), then per block its partial K-tile (rows = K % 128; groups of one block)."""
        assert c0 % self.block == 0 and (cn % self.block == 0 or c0 + cn == self.C), (c0, cn, self.block)
        full, span = self.K // self.parts, self.span
        out = []
        for gs in range(c0 - c0 % span, c0 + cn, span):
            gw = min(span, self.C - gs)  # the group's columns
            lo, hi = max(c0, gs), min(c0 + cn, gs + gw)
            start = self.base + gs * self.K
            if full:
                out.append((lo, hi - lo, self.parts, start + (lo - gs) * full, full * gw))
            if self.K % self.parts:
                out.append((lo, hi - lo, self.K % self.parts, start + full * self.parts * gw, 0))
        return out


def _data_key(view: View) -> tuple:
    """What identifies a constant view's values while the source array is alive: its memory and
    the view's geometry."""
    data = view.buffer.data
    assert data is not None
    return (data.__array_interface__["data"][0], data.dtype.str, data.shape, data.strides, view.offset,
            view.dims, view.strides, view.dtype, view.cast)


def _fresh(size: int, dtype) -> np.ndarray:
    """An uninitialised flat array; from 4 MiB in anonymous memory mapped with its pages populated at
    once. np.empty's memory from 4 MiB on is advised for huge pages, whose first touch on this VM cost the
    kernel 0.4-2.5 s of system time per GB (zeroing, and compaction when huge pages are short), against
    0.3-0.8 s measured for a populated mapping (Llama's LM head: 1 GB of tiles); GPT-2's 48 weight layouts
    of 2-9 MB each: ~0.45 -> ~0.15 CPU s per 226 MB."""
    dtype = np.dtype(dtype)
    nbytes = size * dtype.itemsize
    if nbytes < _FRESH_MAPPED or not hasattr(mmap, "MAP_POPULATE"):
        return np.empty(size, dtype=dtype)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
    return np.frombuffer(memory, dtype=dtype)


_FRESH_MAPPED = 4 << 20  # numpy advises huge pages from this size on


def _group_blocks(flat: np.ndarray, K: int, C: int, block: int, group: int, parts: int) -> np.ndarray:
    """`_tile_blocks`'s layout (K % parts == 0: per block [parts][K-tiles][w]) regrouped so that per batch
    every run of `group` blocks is [parts][its blocks][K-tiles][w] (TiledConst.group)."""
    if group == 1:
        return flat
    out = _fresh(flat.size, flat.dtype)
    full, span = K // parts, block * group
    for b0 in range(0, flat.size, K * C):
        for g0 in range(0, C, span):
            width = min(span, C - g0)
            nb = width // block
            src = flat[b0 + g0 * K:b0 + (g0 + width) * K]
            dst = out[b0 + g0 * K:b0 + (g0 + width) * K].reshape(parts, full * width)
            head = nb * full * block
            dst[:, :head].reshape(parts, nb, full * block)[...] = \
                src[:nb * K * block].reshape(nb, parts, full * block).transpose(1, 0, 2)
            dst[:, head:] = src[nb * K * block:].reshape(parts, -1)
    return out


def _tile_blocks(arr: np.ndarray, compute: str, block: int, parts: int, group: int = 1) -> np.ndarray:
    """The flat `TiledConst` layout of a [batch..., K, C] array in the compute dtype: per batch, per
    column block of `block` columns (the last narrower), [parts][K // parts][w] then the [K % parts][w]
    rest; with `group` > 1 (K % parts == 0), grouped as `_group_blocks` says. Whole blocks are moved with
    one strided copy per batch and part (casting on assignment, as `astype` does); grouped blocks go
    straight to their grouped place (no second copy of the array: Llama's LM head is 1 GB)."""
    *_, K, C = arr.shape
    arr = arr.reshape(-1, K, C)
    full, rest = K // parts, K % parts
    nb, tail = C // block, C % block
    transposed = nb > 0 and arr.strides[1] < arr.strides[2]  # nn.Linear's [out, in] read as [K, C]
    if group > 1 and rest:
        return _group_blocks(_tile_blocks(arr, compute, block, parts), K, C, block, group, parts)
    out = _fresh(arr.size, isa_dtype(compute).numpy)
    pos = 0
    for b in range(arr.shape[0]):
        if group > 1 and not transposed:
            _grouped_blocks(arr[b], out[pos:pos + K * C], block, group, parts)
            pos += K * C
            continue
        if transposed:
            views, tail_view = _block_views(out[pos:pos + K * C], K, C, block, group, parts)
            _transpose_blocks(arr[b, :full * parts, :nb * block], views, full, parts, block)
            if rest:
                dst = out[pos:pos + K * nb * block].reshape(nb, K * block)
                dst[:, full * parts * block:].reshape(nb, rest, block)[...] = \
                    arr[b, full * parts:, :nb * block].reshape(rest, nb, block).transpose(1, 0, 2)
            if tail and group > 1:  # (rest == 0)
                tail_view[...] = arr[b, :, nb * block:].reshape(full, parts, tail).transpose(1, 0, 2)
                pos += K * C
                continue
            pos += K * nb * block
        elif nb:
            dst = out[pos:pos + K * nb * block].reshape(nb, K * block)
            head = arr[b, :full * parts, :nb * block].reshape(full, parts, nb, block)
            dst[:, :full * parts * block].reshape(nb, parts, full, block)[...] = head.transpose(2, 1, 0, 3)
            dst[:, full * parts * block:].reshape(nb, rest, block)[...] = \
                arr[b, full * parts:, :nb * block].reshape(rest, nb, block).transpose(1, 0, 2)
            pos += K * nb * block
        if tail:
            blk = arr[b, :, nb * block:]
            out[pos:pos + full * parts * tail].reshape(parts, full, tail)[...] = \
                blk[:full * parts].reshape(full, parts, tail).transpose(1, 0, 2)
            out[pos + full * parts * tail:pos + K * tail].reshape(rest, tail)[...] = blk[full * parts:]
            pos += K * tail
    return out


def _grouped_blocks(arr: np.ndarray, out: np.ndarray, block: int, group: int, parts: int) -> None:
    """`_group_blocks`'s layout of one [K, C] matrix (K % parts == 0, C its short stride) written into
    `out` (K * C elements) directly: per group of blocks one strided copy, [parts][blocks][K-tiles][w],
    the narrower last block after its group's whole ones."""
    K, C = arr.shape
    full, span = K // parts, block * group
    for g0 in range(0, C, span):
        width = min(span, C - g0)
        whole, tail = divmod(width, block)
        region = out[g0 * K:(g0 + width) * K].reshape(parts, full * width)
        head = whole * full * block
        if whole:
            region[:, :head].reshape(parts, whole, full, block)[...] = \
                arr[:, g0:g0 + whole * block].reshape(full, parts, whole, block).transpose(1, 2, 0, 3)
        if tail:
            region[:, head:].reshape(parts, full, tail)[...] = \
                arr[:, g0 + whole * block:g0 + width].reshape(full, parts, tail).transpose(1, 0, 2)


def _block_views(out: np.ndarray, K: int, C: int, block: int, group: int, parts: int
                 ) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Where each whole column block's [parts][K // parts][block] goes in one batch's `out` (K * C elements),
    and (group > 1) the narrower last block's [parts][K // parts][C % block]: one after the other, or
    interleaved by partition per group of `group` blocks (`_group_blocks`; then K % parts == 0)."""
    full, nb = K // parts, C // block
    if group == 1:
        return list(out[:K * nb * block].reshape(nb, K * block)[:, :full * parts * block]
                    .reshape(nb, parts, full, block)), None
    views: list[np.ndarray] = []
    tail_view = None
    span = block * group
    for g0 in range(0, C, span):
        width = min(span, C - g0)
        whole = width // block
        region = out[g0 * K:(g0 + width) * K].reshape(parts, full * width)
        head = whole * full * block
        views.extend(region[:, :head].reshape(parts, whole, full, block)[:, k] for k in range(whole))
        if width % block:
            tail_view = region[:, head:].reshape(parts, full, width % block)
    return views, tail_view


def _transpose_blocks(arr: np.ndarray, views: list[np.ndarray], full: int, parts: int, block: int) -> None:
    """Each of `views` ([parts][full][block], one per column block) gets its block's full K-tiles from a
    [full * parts, len(views) * block] array whose rows are its short stride. Per column block, the
    [K, block] transpose is built in a scratch array `_TRANSPOSE_ROWS` source rows at a time (each a
    contiguous run of the source, so that few pages are touched at once: a torch tensor's memory has no
    huge pages, and a transposing copy striding over all K rows missed the TLB on every element), then its
    rows are regrouped by partition. A 128256 x 2048 embedding read as the LM head's weight: 3.0 s ->
    0.4-0.6 s (and its destination's first touch)."""
    if not full:
        return
    rows = arr.T  # [blocks * block, full * parts]: the source's rows
    scratch = np.empty((full * parts, block), dtype=arr.dtype)
    step = _TRANSPOSE_ROWS
    for bi, dst in enumerate(views):
        src = rows[bi * block:(bi + 1) * block]
        for j in range(0, block, step):
            np.copyto(scratch[:, j:j + step], src[j:j + step].T)
        dst[...] = scratch.reshape(full, parts, block).transpose(1, 0, 2)


_TRANSPOSE_ROWS = 16  # source rows per transposing copy (measured: 8 -> 0.51 s, 16 -> 0.36, 32 -> 0.64 on 1 GB)


class KOperand:
    """One matmul operand as a [K, C] view (already indexed to one batch)."""

    def __init__(self, builder: ProgramBuilder, view: View, compute: str, role: str, tag: str = "",
                 allow_image: bool = True, tiled: TiledConst | None = None):
        assert view.rank == 2
        self.b = builder
        self.view = view
        self.compute = compute
        self.role = role
        self.tag = f"{tag} {role}" if tag else role
        self.K, self.C = view.dims
        self.parts = builder.target.partitions
        self.nk = -(-self.K // self.parts)
        s_k, s_c = view.strides
        casting = view.stored_dtype != compute
        if s_c == 1 or self.C == 1:
            self.method = "cast" if casting else "direct"
        elif (s_k == 1 or self.K == 1) and (self.K * self.C > builder.options.strided_dma_max_elements
                                            or builder.staged_from(view) is not None):
            # a tensor between kernels is read in rows, which its SBUF image (if kept on chip) serves
            self.method = "transpose"
        else:
            self.method = "strided_cast" if casting else "strided"
        self.chunk = min(self.K, builder.options.transpose_chunk)
        self.pools: dict[str, Pool] = {}
        self.tiled = tiled
        if tiled is not None:
            self.method = "tiled"
        elif allow_image and self.method == "direct" and self.image_ok():
            self.method = "image"

    def image_ok(self) -> bool:
        """Can matmuls read this operand in place (its tensor kept on chip, every K-tile at a legal start)?"""
        return (not self.view.is_const and self.view.buffer.name is not None
                and all(self._image_ap(kt, 0, self.C) is not None for kt in range(self.nk)))

    @staticmethod
    def all_in_place(builder: ProgramBuilder, views: list[View], compute: str) -> bool:
        """Can every batch's operand (the same role) be read in place? Pools are sized once for all."""
        return all(KOperand(builder, v, compute, "probe").method == "image" for v in views)

    def specs(self, cols: int, blocks: int = 1) -> list[PoolSpec]:
        """Staging pools this operand needs to load up to `cols` columns at a time, `blocks` column
        blocks of 128 back to back."""
        stored = itemsize(self.view.stored_dtype)
        r = self.role
        if self.method == "image":
            return []
        if self.method in ("cast", "strided_cast"):
            return [PoolSpec(f"{r}_stage", "sbuf", cols * stored, 3)]
        if self.method == "transpose":
            # all row chunks of the column blocks in flight, so their loads are not queued behind others
            bufs = min(16, (blocks + 1) * -(-self.K // self.chunk) + 1)
            specs = [PoolSpec(f"{r}_rows", "sbuf", self.chunk * stored, bufs)]
            if self.view.stored_dtype != self.compute:
                specs.append(PoolSpec(f"{r}_rows_c", "sbuf", self.chunk * itemsize(self.compute), bufs))
            return specs
        return []

    @property
    def needs_transpose_psum(self) -> bool:
        return self.method == "transpose"

    def bind(self, pools: dict[str, Pool]) -> None:
        """Take this operand's staging pools, and the kernel's shared PSUM pool `tpsum` for transposes."""
        self.pools = {k[len(self.role) + 1:]: v for k, v in pools.items() if k.startswith(self.role + "_")}
        if "tpsum" in pools:
            self.pools["tpsum"] = pools["tpsum"]

    def k_rows(self, kt: int) -> int:
        return min(self.parts, self.K - kt * self.parts)

    def note_layout(self, kernel: str, batches: int = 1) -> None:
        """Record in the memory plan's layout section how this operand reaches K-on-partitions."""
        if self.method not in ("transpose", "strided", "strided_cast"):
            return
        what = (f"{self.nk * -(-self.C // self.parts) * batches} PE transposes (K is its contiguous axis)"
                if self.method == "transpose" else "an element-wise strided DMA (small, K contiguous)")
        self.b.layout_notes.append(f"{kernel} {self.role}: [{self.K}, {self.C}] operand by {what}")

    @property
    def stages(self) -> str | None:
        """The scratch tensor whose staging this operand's buffer is, when keeping that tensor on chip
        would let matmuls read its image instead (PoolSpec.source)."""
        return self.b.staged_from(self.view) if self.method in ("direct", "image") else None

    @property
    def in_sbuf(self) -> bool:
        """Read straight from an SBUF image: the caller needs no buffer for it."""
        return self.method == "image"

    def _image_ap(self, kt: int, c0: int, cn: int, rows: int | None = None) -> AccessPattern | None:
        rows = self.k_rows(kt) if rows is None else rows
        ap = self.view.hbm_ap(0, kt * self.parts, rows, [(1, c0, cn)]) if self.view.buffer.name else None
        if ap is None or self.view.stored_dtype != self.compute:
            return None
        return self.b.resident(ap)

    # -- loading --------------------------------------------------------------------------------------------
    def load(self, dst: Tile | None, c0: int, cn: int, cols: int, at: int = 0) -> Loaded:
        """Emit the loads of columns [c0, c0+cn) of every K-tile into `dst`, at column `at` of each
        K-tile (K-tile stride `cols`); nothing for an image (dst may be None then)."""
        if self.method == "image":
            return Loaded(self, None, 0, 0, 0)
        assert dst is not None
        if self.tiled is not None:
            return self._load_tiled(dst, c0, cn, cols, at)
        loaded = Loaded(self, dst, c0, cols, at)
        self.b.place(self.view)
        if self.method == "transpose":
            self._load_transposed(dst, c0, cn, cols, at)
            return loaded
        for kt in range(self.nk):
            kp = self.k_rows(kt)
            target = dst.flat(self.compute, kp, cn, kt * cols + at)
            src = self.view.hbm_ap(0, kt * self.parts, kp, [(1, c0, cn)])
            label = f"{self.tag} k{kt} c{c0}"
            if self.method in ("direct", "strided"):
                self.b.dma(target, src, f"{label} load")
            else:
                stage = self.pools["stage"].next().flat(self.view.stored_dtype, kp, cn)
                self.b.dma(stage, src, f"{label} load")
                self.b.copy(target, stage, f"{label} cast", engines=("act", "dve", "pool"))
        return loaded

    def _load_tiled(self, dst: Tile, c0: int, cn: int, cols: int, at: int) -> Loaded:
        """A pre-tiled constant: per column block (or the blocks asked for of a group) one DMA, contiguous
        on both sides (SBUF per partition: the blocks side by side, each [K-tiles x width], as `Loaded.ap`
        reads them)."""
        tiled = self.tiled
        assert tiled is not None and at % tiled.block == 0
        self.b.place(tiled.buffer)
        name = tiled.buffer.buffer.name
        size = itemsize(self.compute)
        full = self.K // self.parts
        for bs, w, rows, offset, stride in tiled.loads(c0, cn):
            kt0 = 0 if rows == self.parts else full
            n = (full if rows == self.parts else 1) * w
            src = AccessPattern("hbm", self.compute, offset * size, ((1, n),), partitions=rows, tensor=name,
                                partition_stride=(stride or n) if rows > 1 else 0)
            target = dst.flat(self.compute, rows, n, (at + bs - c0) * self.nk + kt0 * w)
            self.b.dma(target, src, f"{self.tag} c{bs} load")
        return Loaded(self, dst, c0, cols, at, tiled.block)

    def _load_transposed(self, dst: Tile, c0: int, cn: int, cols: int, at: int) -> None:
        b, parts = self.b, self.parts
        ident = b.identity(self.compute)
        stored = self.view.stored_dtype
        for cb in range(c0, c0 + cn, parts):
            cw = min(parts, c0 + cn - cb)
            for k0 in range(0, self.K, self.chunk):
                kw = min(self.chunk, self.K - k0)
                label = f"{self.tag} c{cb} k{k0}"
                # rows of C on partitions, K contiguous along the free dim
                src = self.view.hbm_ap(1, cb, cw, [(0, k0, kw)])
                rows = self._image_rows(src)  # a tensor kept on chip: PE reads its image, no DMA
                if rows is None:
                    rows = self.pools["rows"].next().flat(stored, cw, kw)
                    b.dma(rows, src, f"{label} load rows")
                if stored != self.compute:
                    conv = self.pools["rows_c"].next().flat(self.compute, cw, kw)
                    b.copy(conv, rows, f"{label} cast rows", engines=("act", "dve", "pool"))
                    rows = conv
                blocks = [(k0 + j, min(parts, kw - j)) for j in range(0, kw, parts)]
                self._transpose_blocks(rows, blocks, k0, cw, ident, dst, at + cb - c0, cols, label)

    def _image_rows(self, src: AccessPattern) -> AccessPattern | None:
        """The rows `src` reads, in place in their tensor's SBUF image when it is kept on chip and engines
        may read it there (start-partition rule, K contiguous): the transposes read it with no copy (an
        on-chip DMA occupies a DMA queue as long as an HBM load of the same bytes)."""
        if src.memory != "hbm":
            return None
        on_chip = self.b.resident(src)
        if on_chip is None or len(on_chip.pattern) != 1 or on_chip.pattern[0][0] != 1:
            return None
        return on_chip

    def _transpose_blocks(self, rows, blocks, k0, cw, ident: Tile, dst: Tile, col, cols, label) -> None:
        """PE-transpose [cw, kbw] blocks of `rows` into K-tiles of `dst`, 4 blocks per PSUM bank."""
        b, parts = self.b, self.parts
        per_bank = b.target.psum_bank_bytes // (PSUM_SLOT * 4)
        groups: list[list[tuple[int, int]]] = []
        for blk in blocks:  # group blocks of equal width, at most per_bank per group
            if groups and len(groups[-1]) < per_bank and groups[-1][0][1] == blk[1]:
                groups[-1].append(blk)
            else:
                groups.append([blk])
        for group in groups:
            bank = self.pools["tpsum"].next()
            kbw = group[0][1]
            for slot, (kstart, _) in enumerate(group):
                src = replace(rows, offset=rows.offset + (kstart - k0) * rows.itemsize, pattern=((1, kbw),))
                b.load_stationary(src, f"{label} transpose k{kstart}")
                b.multiply_moving(bank.ap("f32", kbw, [(1, cw)], slot * PSUM_SLOT),
                                  ident.flat(self.compute, cw, cw), acc=False, comment=f"{label} transpose")
            kt0 = group[0][0] // parts
            n = len(group)
            target = dst.ap(self.compute, kbw, [(cols, n), (1, cw)], kt0 * cols + col)
            source = bank.ap("f32", kbw, [(PSUM_SLOT, n), (1, cw)])
            b.copy(target, source, f"{label} transpose evacuate")


@dataclass(frozen=True)
class Loaded:
    """Columns of an operand in SBUF: a staged `tile` holding operand columns from `c0` at column `at`
    of each K-tile (K-tile stride `cols`), or (tile None) the operand's SBUF image."""

    operand: KOperand
    tile: Tile | None
    c0: int
    cols: int
    at: int
    block: int = 0  # > 0: blocks of `block` columns side by side, each [K-tiles x width] (TiledConst)

    def ap(self, kt: int, c: int, n: int, rows: int | None = None) -> AccessPattern:
        """Operand columns [c, c + n) of K-tile kt (its first `rows` rows: default all)."""
        op = self.operand
        if self.tile is None:
            ap = op._image_ap(kt, c, n, rows)
            assert ap is not None
            return ap
        rows = op.k_rows(kt) if rows is None else rows
        if self.block:
            bs = c - (c - self.c0) % self.block
            w = min(self.block, op.C - bs)
            assert c + n <= bs + w, (c, n, bs, w)
            return self.tile.flat(op.compute, rows, n, (self.at + bs - self.c0) * op.nk + kt * w + c - bs)
        return self.tile.flat(op.compute, rows, n, kt * self.cols + self.at + c - self.c0)
