"""Convolution weights as PE stationaries: channel tiling, group packing, tap folding, arrangement.

Channels are tiled into *units* (super-group, input-channel tile, output-channel tile). A super-group
packs several convolution groups into one tile of at most 128 input and 128 output channels with a
block-diagonal weight: PE time does not depend on K or M, so one matmul over packed groups (zeros
between them) costs what one group alone would (depthwise: a diagonal stationary per tap).

When a unit has at most 64 input channels, shifted copies of the input are stacked on the partitions
so that one matmul contracts several taps at once: fh copies shifted by rows (copy a holds input row
r + a * dilation at row r) and, when all kernel rows fit, fw copies of those shifted by columns. The
stationary of chunk (jh, jw) then holds taps (jh * fh + a, jw * fw + c) for copy (a, c).

On chip a unit's weights are [fh * fw * cn partitions, NH * NW * on] (NH, NW: row and column chunks):
partition (a * fw + c) * cn + ci, free ((jh * NW + jw) * on + o) holds W[o, ci, jh * fh + a, jw * fw + c]
(zero across groups and past the kernel).
A constant weight is arranged so at compile time: all units side by side in one [P, units * F] tensor in
the compute dtype, the units of one output-channel tile adjacent (its input-channel tiles in order), so
that every load -- all units when resident, one output-channel tile's units when streamed -- is one
contiguous run per partition, moved in pieces of WEIGHT_RUN bytes per partition on groups of
WEIGHT_PARTS partitions, columns first (the first chunks' stationaries arrive first, and the pieces
spread over the DMA queues). Any other weight is scattered into place on chip by DMA.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels.conv_geometry import copy, fill
from backend.layout import View, itemsize
from isa.dtypes import dtype as isa_dtype
from isa.instructions import start_partition_allowed
from isa.program import AccessPattern

WEIGHT_RUN = 2048  # bytes per partition of one weight transfer (descriptor overhead 256 B per run: 12%)
DIAGONAL_DTYPES = ("bf16", "f16", "f32")
DIAGONAL_ENGINES = ("act", "dve", "pool")  # build the depthwise diagonal stationaries
WEIGHT_PARTS = 32  # partitions of one weight transfer (pieces of 64 KiB at most: many queues in flight)
# resident weights are prefetched kernels ahead (alloc.py: placed apart), so their first stationaries need not
# land first: longer runs (descriptor overhead 6%) on fewer partitions (DMA has no start-partition rule), in
# pieces of 64 KiB still, so that no transfer holds its FIFO queue long (ResNet-50: 8 KiB runs on 8 partitions
# 316.0 us, 12 KiB on 4: 314.5, 4 KiB on 16: 312.8; 8 KiB on 32, 256 KiB pieces: +15 us)
AHEAD_RUN, AHEAD_PARTS = 4096, 16


def _tiles(start: int, count: int, most: int) -> tuple[tuple[int, int], ...]:
    return tuple((s, min(most, start + count - s)) for s in range(start, start + count, most))


@dataclass(frozen=True)
class Unit:
    """Input channels [c0, c0 + cn) (tile `t` of super-group `sg`) x output channels [o0, o0 + on)."""

    index: int
    sg: int
    t: int
    c0: int
    cn: int
    o0: int
    on: int
    fh: int
    fw: int
    spread: int = 1  # depthwise: row ranges of the tile's channels side by side on the partitions

    @property
    def copies(self) -> int:
        return self.fh * self.fw

    @property
    def lanes(self) -> int:
        """Partitions of the input tile and of the stationary's rows (one copy per row range)."""
        return self.cn * self.spread

    @property
    def outs(self) -> int:
        """Stationary columns = accumulator partitions."""
        return self.on * self.spread


@dataclass(frozen=True)
class SuperGroup:
    ci: tuple[tuple[int, int], ...]  # input-channel tiles (start, count)
    co: tuple[tuple[int, int], ...]  # output-channel tiles
    fh: int  # input copies shifted by rows
    fw: int  # ... and by columns (> 1 only when all kernel rows are folded)
    spread: int = 1  # depthwise: output row ranges side by side on the partitions (spread_tiles)


FoldCost = Callable[[int, int, int, int], float]  # (fh, fw, cn, output-channel tiles) -> estimated ns


def folds(cn: int, kernel: tuple[int, int], parts: int) -> list[tuple[int, int]]:
    """The (fh, fw) copy arrangements possible for a tile of `cn` input channels."""
    options = [(fh, 1) for fh in range(1, min(kernel[0], parts // cn) + 1)]
    if kernel[0] * cn <= parts:
        options += [(kernel[0], fw) for fw in range(2, min(kernel[1], parts // (cn * kernel[0])) + 1)]
    return options


def super_groups(channels: int, outputs: int, groups: int, kernel: tuple[int, int], parts: int,
                 cost: FoldCost) -> list[SuperGroup]:
    """Channel tiles; the fold of a single-tile super-group is the cheapest by `cost` (none if depthwise)."""
    cig, cog = channels // groups, outputs // groups
    pack = max(1, min(groups, parts // cig, parts // cog)) if cig <= parts and cog <= parts else 1
    result = []
    for g0 in range(0, groups, pack):
        gn = min(pack, groups - g0)
        ci = _tiles(g0 * cig, gn * cig, parts)
        co = _tiles(g0 * cog, gn * cog, parts)
        fh, fw = 1, 1
        # depthwise stays unfolded: its stationaries are diagonals built on chip from the taps; folded copies
        # would need the zero-padded banks from HBM (128 x the weight's bytes: 3 MiB for 192 channels 7x7)
        if len(ci) == 1 and not cig == cog == 1:
            fh, fw = min(folds(ci[0][1], kernel, parts), key=lambda f: (cost(*f, ci[0][1], len(co)), f[0] * f[1]))
        result.append(SuperGroup(ci, co, fh, fw))
    return result


def spread_tiles(sgs: list[SuperGroup], rows: int, parts: int) -> list[SuperGroup]:
    """Depthwise super-groups whose tile leaves partitions idle (ConvNeXt's 96 and 192 channels): a tile of
    n <= parts / 2 channels holds its input for s = parts // n ranges of output rows side by side on the
    partitions (block-diagonal stationaries, one matmul per tap for all of them: PE and the other engines
    process s times fewer pixels per partition); a tile of parts / 2 < n < parts channels is split into
    parts / 2 channels spread over 2 ranges and the rest spread further, when that halves less work than it
    adds. `rows` (the output rows) must divide evenly into each tile's ranges, and each range start where
    the compute engines may address its partitions (32 or 64 channels: their epilogues run there)."""

    def spread(n: int) -> int:  # ranges start where compute engines may address n partitions (the epilogue's)
        s = parts // n
        while s > 1 and (rows % s or not all(start_partition_allowed(a * n, n) for a in range(s))):
            s -= 1
        return s

    result = []
    for sg in sgs:
        ((c0, n),) = sg.ci
        if n == parts or (sg.fh, sg.fw) != (1, 1):
            result.append(sg)
        elif 2 * n <= parts:
            result.append(replace(sg, spread=spread(n)))
        else:
            half, rest = parts // 2, n - parts // 2
            if 1 / spread(half) + 1 / spread(rest) < 1:
                result += [SuperGroup(((c0, half),), ((c0, half),), 1, 1, spread(half)),
                           SuperGroup(((c0 + half, rest),), ((c0 + half, rest),), 1, 1, spread(rest))]
            else:
                result.append(sg)
    return result


class ConvWeights:
    """The weight view (O, I, KH, KW), tiled into units; loads each unit's stationary bank."""

    def __init__(self, builder: ProgramBuilder, w: View, groups: int, sgs: list[SuperGroup], compute: str,
                 flip: tuple[bool, bool], tag: str):
        self.b, self.w, self.compute, self.flip, self.tag = builder, w, compute, flip, tag
        self.O, self.I, self.KH, self.KW = w.dims
        self.cig, self.cog = self.I, self.O // groups
        self.units: list[Unit] = []
        for s, sg in enumerate(sgs):
            for t, (c0, cn) in enumerate(sg.ci):
                for o0, on in sg.co:
                    self.units.append(Unit(len(self.units), s, t, c0, cn, o0, on, sg.fh, sg.fw, sg.spread))
        self.P = max(u.copies * u.lanes for u in self.units)
        self.F = max(self.chunks(u)[0] * self.chunks(u)[1] * u.outs for u in self.units)
        # column slot (in banks of F) of each unit: an output-channel tile's units side by side
        order = sorted(self.units, key=lambda u: (u.sg, u.o0, u.t))
        self.slot = {u.index: n for n, u in enumerate(order)}
        self.tiles_per_fetch = max(len(sg.ci) for sg in sgs)
        self.resident = False
        self.pools: dict[str, Pool] = {}
        self._tiles: dict[int, tuple[Tile, int]] = {}  # unit -> (tile, element offset of its bank)
        self._casting = not w.is_const and w.stored_dtype != compute
        self._const: View | None = None
        # depthwise: the diagonal stationaries are built on chip from the taps (see _load_diagonal)
        self.taps = self.KH * self.KW
        self.diagonal = (w.is_const and groups > 1 and self.cig == 1 and self.cog == 1 and compute in DIAGONAL_DTYPES
                         and all(u.copies == 1 and u.c0 == u.o0 and u.cn == u.on for u in self.units))
        self.pe_taps: frozenset[int] | None = None  # depthwise: the taps PE multiplies (None: all; depthwise.py)
        self._tap_tiles: dict[int, tuple[Tile, int]] = {}  # unit -> (taps tile, element offset of its taps)

    def chunks(self, unit: Unit) -> tuple[int, int]:
        """Row and column chunks (NH, NW): matmuls per unit and output block."""
        return -(-self.KH // unit.fh), -(-self.KW // unit.fw)

    def specs(self, budget: int, streamed_bufs: int) -> list[PoolSpec]:
        """Resident (all units, loaded once) when they fit `budget` bytes per partition, else
        `streamed_bufs` rotating unit buffers."""
        total = len(self.units) * self.F
        csz = itemsize(self.compute)
        self.resident = total * csz <= budget
        size, bufs = (total, 1) if self.resident else (self.tiles_per_fetch * self.F, streamed_bufs)
        # resident weights loaded by DMA are placed apart (alloc.py: their loads run kernels ahead); depthwise
        # stationaries are built on chip from their taps, which are
        specs = [PoolSpec("w", "sbuf", size * csz, bufs, prefetch=self.resident and not self.diagonal)]
        if self.diagonal:
            loaded = len(self.units) if self.resident else self.tiles_per_fetch
            specs.append(PoolSpec("w_taps", "sbuf", loaded * self.taps * csz, 2, prefetch=self.resident))
        if self._casting:
            specs.append(PoolSpec("w_stage", "sbuf", size * itemsize(self.w.stored_dtype), 1))
        return specs

    def bind(self, pools: dict[str, Pool]) -> None:
        self.pools = pools

    def prefetch(self) -> None:
        """Resident mode: load every unit now (before the first input loads, which PE also waits for)."""
        if self.resident and not self._tiles:
            tile = self.pools["w"].next()
            self._load(tile, self.units)
            self._tiles = {u.index: (tile, self.slot[u.index] * self.F) for u in self.units}

    def stationary(self, unit: Unit, jh: int, jw: int) -> tuple[Tile, int, int]:
        """(tile, element offset, partitions K) of the [K, on] stationary of chunk (jh, jw): the copies of
        kernel rows past the last are left out of K (they are the last partitions)."""
        self.prefetch()
        tile, base = self._tiles[unit.index]
        k = min(unit.fh, self.KH - jh * unit.fh) * unit.fw * unit.lanes
        return tile, base + (jh * self.chunks(unit)[1] + jw) * unit.outs, k

    def fetch(self, units: list[Unit]) -> None:
        """Streamed mode: load the banks of `units` (an output-channel tile's, adjacent slots) into a fresh
        buffer (before their matmuls)."""
        if self.resident:
            return
        tile = self.pools["w"].next()
        first = min(self.slot[u.index] for u in units)
        assert sorted(self.slot[u.index] - first for u in units) == list(range(len(units))), "units not adjacent"
        self._load(tile, units)
        self._tiles = {u.index: (tile, (self.slot[u.index] - first) * self.F) for u in units}

    # -- loading --------------------------------------------------------------------------------------------
    def _load(self, tile: Tile, units: list[Unit]) -> None:
        """The banks of `units` (adjacent slots) into `tile`, from the arranged constant or scattered."""
        first = min(self.slot[u.index] for u in units)
        if self.diagonal:
            self._load_diagonal(tile, units, first)
            return
        if not self.w.is_const:
            self._scatter(tile, units, lambda u: (self.slot[u.index] - first) * self.F)
            return
        if self._const is None:
            self._const = self.b.new_const(self._arranged(), self.compute)
        parts = max(u.copies * u.cn for u in units)
        width = len(units) * self.F
        step = max(1, (AHEAD_RUN if self.resident else WEIGHT_RUN) // itemsize(self.compute))
        label = f"{self.tag} weights" + ("" if len(units) == len(self.units) else f" o{units[0].o0}")
        for f0 in range(0, width, step):  # column chunks first: the first stationaries land first
            fn = min(step, width - f0)
            rows = AHEAD_PARTS if self.resident else WEIGHT_PARTS
            for p0 in range(0, parts, rows):
                pn = min(rows, parts - p0)
                src = self._const.hbm_ap(0, p0, pn, [(1, first * self.F + f0, fn)])
                dst = replace(tile.flat(self.compute, pn, fn, f0), start_partition=p0)
                self.b.dma(dst, src, label, split=pn * fn * itemsize(self.compute))

    def _load_diagonal(self, tile: Tile, units: list[Unit], first: int) -> None:
        """Depthwise stationaries: unit u's bank holds, per tap t, diag(w[c0:c0+cn, t]), i.e. mostly zeros
        (128x the weight's bytes). Load the taps [cn, KH * KW] instead (one small DMA) and build the banks
        on chip: per tap, the identity times the tap's per-partition weight (one input, [cn, on] free),
        spread over ACT (scale vector), DVE and GpSimd (scalar vector) by their load. (One two-input
        multiply of the identity by the taps, both broadcast, cost ~2x the elements on DVE alone: ~11 us
        per 128-channel tile of a 7x7 kernel, more than the tile's matmuls at 7x7 pixels.)"""
        if self._const is None:
            self._const = self.b.new_const(self._tap_array(), self.compute)
        parts, width = max(u.lanes for u in units), len(units) * self.taps
        taps = self.pools["w_taps"].next()
        src = self._const.hbm_ap(0, 0, parts, [(1, first * self.taps, width)])
        self.b.dma(taps.flat(self.compute, parts, width), src, f"{self.tag} weights taps")
        ident = self.b.identity(self.compute)
        for u in units:
            k = self.slot[u.index] - first
            self._tap_tiles[u.index] = (taps, k * self.taps)
            eye = ident.ap(self.compute, u.lanes, ((1, u.outs),))  # spread: one diagonal over every range
            for t in range(self.taps):
                if self.pe_taps is not None and t not in self.pe_taps:
                    continue  # computed off PE (depthwise.py): no stationary
                dst = tile.ap(self.compute, u.lanes, ((1, u.outs),), k * self.F + t * u.outs)
                w = taps.ap(self.compute, u.lanes, ((1, 1),), k * self.taps + t)
                label = f"{self.tag} weights u{u.index} tap {t} diagonal stationaries"
                engine = self.b.pick_engine(DIAGONAL_ENGINES)
                if engine == "act":
                    self.b.activation(dst, eye, "identity", scale_vec=w, comment=label)
                else:
                    self.b.emit(engine, "tensor_scalar", label, {"op": "multiply", "scalar": 0.0},
                                dst=dst, src=eye, scalar_vec=w)

    def tap_scale(self, unit: Unit, t: int) -> AccessPattern:
        """Depthwise: the per-partition [cn, 1] weights of tap `t` of `unit` (loaded with its stationaries)."""
        self.prefetch()
        tile, base = self._tap_tiles[unit.index]
        return tile.ap(self.compute, unit.lanes, ((1, 1),), base + t)

    def _tap_array(self) -> np.ndarray:
        """[P, units * KH * KW]: unit slot s, partition p holds the taps of channel c0 + p % cn (kernel rows,
        then columns, flipped as the window says; a spread unit's ranges repeat its channels)."""
        w = self.w.const_array().astype(np.float32)[:, 0]
        if self.flip[0]:
            w = w[:, ::-1]
        if self.flip[1]:
            w = w[:, :, ::-1]
        out = np.zeros((self.P, len(self.units), self.taps), np.float32)
        for u in self.units:
            out[:u.lanes, self.slot[u.index]] = np.tile(w[u.c0:u.c0 + u.cn].reshape(u.cn, self.taps), (u.spread, 1))
        return out.reshape(self.P, -1).astype(isa_dtype(self.compute).numpy)

    def _arranged(self) -> np.ndarray:
        """All units' banks, [P, units * F], zero where no weight applies."""
        w = self.w.const_array().astype(np.float32)
        if self.flip[0]:
            w = w[:, :, ::-1]
        if self.flip[1]:
            w = w[:, :, :, ::-1]
        out = np.zeros((self.P, len(self.units), self.F), np.float32)
        for u in self.units:
            c = np.arange(u.c0, u.c0 + u.cn)
            o = np.arange(u.o0, u.o0 + u.on)
            mask = (c // self.cig)[:, None] == (o // self.cog)[None, :]  # (cn, on): same group
            i = c - (c // self.cig) * self.cig
            nh, nw = self.chunks(u)
            bank = np.zeros((u.fh, u.fw, u.cn, nh, nw, u.on), np.float32)
            for a, c, jh, jw in itertools.product(range(u.fh), range(u.fw), range(nh), range(nw)):
                kh, kw = jh * u.fh + a, jw * u.fw + c
                if kh < self.KH and kw < self.KW:
                    bank[a, c, :, jh, jw] = w[u.o0:u.o0 + u.on][:, i, kh, kw].T * mask
            flat = bank.reshape(u.copies * u.cn, -1)
            out[:flat.shape[0], self.slot[u.index], :flat.shape[1]] = flat
        return out.reshape(self.P, -1).astype(isa_dtype(self.compute).numpy)

    def _scatter(self, tile: Tile, units: list[Unit], base_of) -> None:
        """Runtime weights: zero the bank, DMA every (group, copy, chunk) block into place, cast."""
        b, stored = self.b, self.w.stored_dtype
        landing = self.pools["w_stage"].next() if self._casting else tile
        ldt = stored if self._casting else self.compute
        size = len(units) * self.F
        fill(b, landing, ldt, self.P, size, 0.0, f"{self.tag} weights zero")
        self.b.place(self.w)
        for u in units:
            base = base_of(u)
            for g in range(u.c0 // self.cig, (u.c0 + u.cn - 1) // self.cig + 1):
                c_lo, c_hi = max(u.c0, g * self.cig), min(u.c0 + u.cn, (g + 1) * self.cig)
                o_lo, o_hi = max(u.o0, g * self.cog), min(u.o0 + u.on, (g + 1) * self.cog)
                if o_lo >= o_hi:
                    continue
                nh, nw = self.chunks(u)
                for a, c, jh, jw in itertools.product(range(u.fh), range(u.fw), range(nh), range(nw)):
                    kh, kw = jh * u.fh + a, jw * u.fw + c
                    if kh >= self.KH or kw >= self.KW:
                        continue
                    src = self.w.hbm_ap(1, c_lo - g * self.cig, c_hi - c_lo, [(0, o_lo, o_hi - o_lo)], {
                        2: self.KH - 1 - kh if self.flip[0] else kh, 3: self.KW - 1 - kw if self.flip[1] else kw})
                    dst = landing.ap(ldt, c_hi - c_lo, [(1, o_hi - o_lo)], base + (jh * nw + jw) * u.on + o_lo - u.o0)
                    self.b.dma(replace(dst, start_partition=(a * u.fw + c) * u.cn + c_lo - u.c0), src,
                               f"{self.tag} weights g{g} tap ({kh}, {kw})")
        if self._casting:
            copy(b, tile, landing, self.compute, stored, self.P, size, f"{self.tag} weights cast")
