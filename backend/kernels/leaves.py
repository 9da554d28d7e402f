"""Loading the HBM operands (leaves) of an expression, tile by tile, with caching.

A tile is [pw partitions along p_axis x the free axes]; how a leaf is read depends on its strides:
- "pvec":   stride 0 along every free axis (e.g. a bias along the partition axis, a per-row statistic):
            a [P, 1] vector, loaded once per partition block and used as a per-partition operand.
- "fbcast": stride 0 along p (e.g. a bias along the free axis): the row is read once into one
            partition and POOL's partition_reduce of that single partition broadcasts it to all of them
            (a DMA with partition_stride 0 would read it from HBM once per partition); cached per free
            range, so reused across blocks.
- "pconst": a constant vector along the partition axis only (a bias of a feature-major matmul): stored at
            compile time as [128, blocks] (element [p, j] = v[j * 128 + p]) and loaded once, in one DMA of
            one contiguous run per partition, for every partition block.
- "tensor": anything else: one DMA per tile; when the leaf does not vary along the kernel's loop axes
            (e.g. an attention mask shared by every head) and all its distinct tiles fit, each is loaded
            once and kept.
"""

from __future__ import annotations

from math import prod

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels.evaluate import Operand, PVec, Tensor
from backend.kernels.expr import Node, walk
from backend.layout import itemsize

TENSOR_BUFFERS = 3
BROADCAST_DMA_PARTITIONS = 8  # a row broadcast to more partitions is broadcast on chip (read once)
Free = list[tuple[int, int, int]]  # (axis, start, count) per free axis, outermost first


class LeafLoader:
    def __init__(self, builder: ProgramBuilder, root: Node, p_axis: int | None, free_axes: tuple[int, ...] | int,
                 label: str, loop_axes: tuple[int, ...] = ()):
        self.builder = builder
        self.p_axis = p_axis
        self.loop_axes = loop_axes
        self.kept: set[int] = set()  # "tensor" leaves whose tiles are loaded once and kept
        self.free_axes = (free_axes,) if isinstance(free_axes, int) else tuple(free_axes)
        self.label = label
        self.leaves = [n for n in walk(root) if n.op == "leaf"]
        self.modes = {id(n): self._mode(n) for n in self.leaves}
        self.pools: dict[int, Pool] = {}
        self.single: dict[int, Pool] = {}  # fbcast leaves broadcast on chip: their one-partition rows
        self._cache: dict[tuple, Tile] = {}
        self._owner: dict[int, tuple] = {}
        self.pmax = 1

    def _mode(self, node: Node) -> str:
        view = node.view
        assert view is not None
        if all(view.strides[a] == 0 or view.dims[a] == 1 for a in self.free_axes):
            if (view.is_const and self.p_axis is not None and view.dims[self.p_axis] > 1
                    and all(view.strides[a] == 0 or view.dims[a] == 1 for a in range(view.rank) if a != self.p_axis)):
                return "pconst"
            return "pvec"
        if self.p_axis is None or view.strides[self.p_axis] == 0:
            return "fbcast"
        return "tensor"

    def kinds(self) -> dict[int, str]:
        """Operand kind (evaluate.py's T/V) of every leaf."""
        return {key: "V" if mode in ("pvec", "pconst") else "T" for key, mode in self.modes.items()}

    def specs(self, pmax: int, fmax: int, f_tiles: int, budget: int, loop_tiles: int = 0) -> list[PoolSpec]:
        """Pools for all leaves: tiles of up to [pmax, fmax]; `f_tiles` free ranges per partition block.
        Broadcast rows stay resident across partition blocks when they fit in `budget` bytes; leaves
        constant along the loop axes keep all their `loop_tiles` distinct tiles when those fit."""
        self.pmax = pmax
        specs = []
        for i, node in enumerate(self.leaves):
            isz = itemsize(node.dtype)
            mode = self.modes[id(node)]
            if mode == "pvec":
                specs.append(PoolSpec(f"leaf{i}_vec", "sbuf", isz, 2))
            elif mode == "pconst":
                blocks = -(-node.view.dims[self.p_axis] // self.builder.target.partitions)  # type: ignore
                specs.append(PoolSpec(f"leaf{i}_pconst", "sbuf", blocks * isz, 1))
            elif mode == "fbcast":
                bufs = f_tiles + 1 if (f_tiles + 1) * fmax * isz <= budget else 2
                specs.append(PoolSpec(f"leaf{i}_row", "sbuf", fmax * isz, bufs))
                if self._broadcast_on_chip(node, pmax):
                    specs.append(PoolSpec(f"leaf{i}_one", "sbuf", fmax * isz, 2))
            elif (self.loop_axes and 0 < loop_tiles and loop_tiles * fmax * isz <= budget
                  and all(node.view.strides[a] == 0 or node.view.dims[a] == 1  # type: ignore[union-attr]
                          for a in self.loop_axes)):
                self.kept.add(id(node))
                specs.append(PoolSpec(f"leaf{i}_kept", "sbuf", fmax * isz, loop_tiles))
            else:
                specs.append(PoolSpec(f"leaf{i}_tile", "sbuf", fmax * isz, TENSOR_BUFFERS))
        return specs

    def _broadcast_on_chip(self, node: Node, pmax: int) -> bool:
        """Broadcast this row to the partitions on chip (POOL) rather than by DMA?"""
        view = node.view
        return pmax > BROADCAST_DMA_PARTITIONS and view is not None and view.dtype in ("f32", "bf16", "f16")

    def bind(self, pools: dict[str, Pool]) -> None:
        for i, node in enumerate(self.leaves):
            name = next(n for n in pools if n.startswith(f"leaf{i}_") and not n.endswith("_one"))
            self.pools[id(node)] = pools[name]
            if f"leaf{i}_one" in pools:
                self.single[id(node)] = pools[f"leaf{i}_one"]

    def load(self, fixed: dict[int, int], p0: int, pw: int, free: Free | int, fw: int | None = None
             ) -> dict[int, Operand]:
        """Operands of every leaf for the tile [p0:p0+pw] x `free` (other axes pinned by `fixed`); with
        one free axis, `free` may also be its start and `fw` its count."""
        if isinstance(free, int):
            assert fw is not None and len(self.free_axes) == 1
            free = [(self.free_axes[0], free, fw)]
        result: dict[int, Operand] = {}
        fw = prod(n for _, _, n in free)
        fkey = tuple(sorted(fixed.items()))
        for node in self.leaves:
            mode = self.modes[id(node)]
            view = node.view
            assert view is not None
            self.builder.place(view)
            parts = self.builder.target.partitions
            if mode == "pconst" and p0 % parts == 0:
                tile = self._cached(node, (id(node),), lambda t, n=node: self._pconst(n, t))
                result[id(node)] = PVec(tile.flat(view.dtype, pw, 1, p0 // parts))
            elif mode in ("pvec", "pconst"):  # pconst tiles start at multiples of 128 (grouped convs: not)
                key = (id(node), fkey, p0, pw)
                ones = [(a, 0, 1) for a, _, _ in free]
                tile = self._cached(node, key, lambda t, v=view, ones=ones: self._dma(
                    t.flat(v.dtype, pw, 1), v.hbm_ap(self.p_axis, p0, pw, ones, fixed)))
                result[id(node)] = PVec(tile.flat(view.dtype, pw, 1))
            elif mode == "fbcast":
                key = (id(node), fkey, tuple(free))
                tile = self._cached(node, key, lambda t, n=node, v=view, f=free: self._broadcast(n, t, v, f, fw, fixed))
                result[id(node)] = Tensor(tile.flat(view.dtype, pw, fw))
            elif id(node) in self.kept:
                key = (id(node), p0, pw, tuple(free))
                tile = self._cached(node, key, lambda t, v=view, f=free: self._dma(
                    t.flat(v.dtype, pw, fw), v.hbm_ap(self.p_axis, p0, pw, f, fixed)))
                result[id(node)] = Tensor(tile.flat(view.dtype, pw, fw))
            else:
                src = view.hbm_ap(self.p_axis, p0, pw, free, fixed)
                in_place = self.builder.resident(src)  # a tensor kept on chip is read in place where engines may
                if in_place is None:
                    in_place = self.pools[id(node)].next().flat(view.dtype, pw, fw)
                    self._dma(in_place, src)
                result[id(node)] = Tensor(in_place)
        return result

    def _cached(self, node: Node, key: tuple, fill) -> Tile:
        tile = self._cache.get(key)
        if tile is None:
            tile = self.pools[id(node)].next()
            old = self._owner.pop(id(tile), None)
            if old is not None:
                del self._cache[old]
            self._cache[key] = tile
            self._owner[id(tile)] = key
            fill(tile)
        return tile

    def _broadcast(self, node: Node, tile: Tile, view, free: Free, fw: int, fixed: dict[int, int]) -> None:
        """A row (constant along the partitions) into all pmax partitions of `tile`."""
        pn = self.pmax
        if id(node) not in self.single:
            self._dma(tile.flat(view.dtype, pn, fw), view.hbm_ap(self.p_axis, 0, pn, free, fixed))
            return
        one = self.single[id(node)].next().flat(view.dtype, 1, fw)
        self._dma(one, view.hbm_ap(self.p_axis, 0, 1, free, fixed))
        self.builder.emit("pool", "partition_reduce", f"{self.label} broadcast row", {"op": "add"},
                          dst=tile.flat(view.dtype, pn, fw), src=one)

    def _pconst(self, node: Node, tile: Tile) -> None:
        """The whole constant vector as [128, blocks], one DMA (see the "pconst" mode)."""
        view = node.view
        assert view is not None and self.p_axis is not None
        parts = self.builder.target.partitions
        arr = view.const_array()
        vec = arr[tuple(slice(None) if a == self.p_axis else 0 for a in range(view.rank))]
        blocks = -(-vec.size // parts)
        table = np.zeros(blocks * parts, dtype=vec.dtype)
        table[:vec.size] = vec
        const = self.builder.new_const(table.reshape(blocks, parts).T.copy(), view.dtype)
        rows = min(parts, vec.size)
        self._dma(tile.flat(view.dtype, rows, blocks), const.hbm_ap(0, 0, rows, [(1, 0, blocks)]))

    def _dma(self, dst, src) -> None:
        self.builder.dma(dst, src, f"{self.label} load")
