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
A constant weight is arranged so at compile time (all units side by side in one [P, units * F] tensor,
one DMA when resident); any other weight is scattered into place on chip by DMA.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels.conv_geometry import DMA_PIECE, copy, fill
from backend.layout import View, itemsize
from isa.dtypes import dtype as isa_dtype


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

    @property
    def copies(self) -> int:
        return self.fh * self.fw


@dataclass(frozen=True)
class SuperGroup:
    ci: tuple[tuple[int, int], ...]  # input-channel tiles (start, count)
    co: tuple[tuple[int, int], ...]  # output-channel tiles
    fh: int  # input copies shifted by rows
    fw: int  # ... and by columns (> 1 only when all kernel rows are folded)


FoldCost = Callable[[int, int, int, int], float]  # (fh, fw, cn, output-channel tiles) -> estimated ns


def folds(cn: int, kernel: tuple[int, int], parts: int) -> list[tuple[int, int]]:
    """The (fh, fw) copy arrangements possible for a tile of `cn` input channels."""
    options = [(fh, 1) for fh in range(1, min(kernel[0], parts // cn) + 1)]
    if kernel[0] * cn <= parts:
        options += [(kernel[0], fw) for fw in range(2, min(kernel[1], parts // (cn * kernel[0])) + 1)]
    return options


def super_groups(channels: int, outputs: int, groups: int, kernel: tuple[int, int], parts: int,
                 cost: FoldCost) -> list[SuperGroup]:
    """Channel tiles; the fold of a single-tile super-group is the cheapest by `cost`."""
    cig, cog = channels // groups, outputs // groups
    pack = max(1, min(groups, parts // cig, parts // cog)) if cig <= parts and cog <= parts else 1
    result = []
    for g0 in range(0, groups, pack):
        gn = min(pack, groups - g0)
        ci = _tiles(g0 * cig, gn * cig, parts)
        co = _tiles(g0 * cog, gn * cog, parts)
        fh, fw = 1, 1
        if len(ci) == 1:
            fh, fw = min(folds(ci[0][1], kernel, parts), key=lambda f: (cost(*f, ci[0][1], len(co)), f[0] * f[1]))
        result.append(SuperGroup(ci, co, fh, fw))
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
                    self.units.append(Unit(len(self.units), s, t, c0, cn, o0, on, sg.fh, sg.fw))
        self.P = max(u.copies * u.cn for u in self.units)
        self.F = max(self.chunks(u)[0] * self.chunks(u)[1] * u.on for u in self.units)
        self.resident = False
        self.pools: dict[str, Pool] = {}
        self._tiles: dict[int, Tile] = {}
        self._casting = not w.is_const and w.stored_dtype != compute
        self._const: View | None = None

    def chunks(self, unit: Unit) -> tuple[int, int]:
        """Row and column chunks (NH, NW): matmuls per unit and output block."""
        return -(-self.KH // unit.fh), -(-self.KW // unit.fw)

    def specs(self, budget: int, streamed_bufs: int) -> list[PoolSpec]:
        """Resident (all units, loaded once) when they fit `budget` bytes per partition, else
        `streamed_bufs` rotating unit buffers."""
        total = len(self.units) * self.F
        csz = itemsize(self.compute)
        self.resident = total * csz <= budget
        size, bufs = (total, 1) if self.resident else (self.F, streamed_bufs)
        specs = [PoolSpec("w", "sbuf", size * csz, bufs)]
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
            self._tiles = {u.index: tile for u in self.units}

    def stationary(self, unit: Unit, jh: int, jw: int) -> tuple[Tile, int, int]:
        """(tile, element offset, partitions K) of the [K, on] stationary of chunk (jh, jw): the copies of
        kernel rows past the last are left out of K (they are the last partitions)."""
        if self.resident:
            self.prefetch()
            tile, base = self._tiles[unit.index], unit.index * self.F
        else:
            tile, base = self._tiles[unit.index], 0
        k = min(unit.fh, self.KH - jh * unit.fh) * unit.fw * unit.cn
        return tile, base + (jh * self.chunks(unit)[1] + jw) * unit.on, k

    def fetch(self, units: list[Unit]) -> None:
        """Streamed mode: load the banks of `units` into fresh buffers (before their matmuls)."""
        if self.resident:
            return
        self._tiles = {}
        for u in units:
            tile = self.pools["w"].next()
            self._load_one(tile, u)
            self._tiles[u.index] = tile

    # -- loading --------------------------------------------------------------------------------------------
    def _load(self, tile: Tile, units: list[Unit]) -> None:
        if self.w.is_const:
            data = self._arranged()
            view = self.b.new_const(data, self.compute)
            src = view.hbm_ap(0, 0, self.P, [(1, 0, data.shape[1])])
            self.b.dma(tile.flat(self.compute, self.P, data.shape[1]), src, f"{self.tag} weights", split=DMA_PIECE,
                       min_run=512)
            return
        self._scatter(tile, units, lambda u: u.index * self.F)

    def _load_one(self, tile: Tile, unit: Unit) -> None:
        if self.w.is_const:
            if self._const is None:
                self._const = self.b.new_const(self._arranged(), self.compute)
            p = unit.copies * unit.cn
            src = self._const.hbm_ap(0, 0, p, [(1, unit.index * self.F, self.F)])
            self.b.dma(tile.flat(self.compute, p, self.F), src, f"{self.tag} weights u{unit.index}", split=DMA_PIECE,
                       min_run=512)
            return
        self._scatter(tile, [unit], lambda u: 0)

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
            out[:flat.shape[0], u.index, :flat.shape[1]] = flat
        return out.reshape(self.P, -1).astype(isa_dtype(self.compute).numpy)

    def _scatter(self, tile: Tile, units: list[Unit], base_of) -> None:
        """Runtime weights: zero the bank, DMA every (group, copy, chunk) block into place, cast."""
        b, stored = self.b, self.w.stored_dtype
        landing = self.pools["w_stage"].next() if self._casting else tile
        ldt = stored if self._casting else self.compute
        size = len(units) * self.F if len(units) > 1 else self.F
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
