"""The elementwise epilogue of the convolution, pooling and gather kernels, in one place.

Each of those kernels produces an fp32 accumulator tile (PSUM for PE kernels, SBUF for pooling) of
[pw partitions x fw free elements] along two logical axes of its output (p_axis, f_axis; other axes
pinned), and evaluates the epilogue expression (a fused bias, activation, residual, scale, or just the
conversion to the output type) over it on the way to the store, exactly as a dot kernel does.
"""

from __future__ import annotations

from dataclasses import replace

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels.evaluate import Coords, Temporaries, TileEvaluator, dry_operand
from backend.kernels.expr import Node, has_reduce, substitute_views, view_nodes
from backend.kernels.leaves import LeafLoader
from backend.layout import View, itemsize
from hlo.errors import CompilationError
from isa.program import AccessPattern

LEAF_BUDGET = 16 * 1024  # bytes per partition for cached broadcast rows of the epilogue's operands
SMALL_OUT_BYTES, SMALL_OUT_BUFS = 256, 16  # result tiles this small get this many buffers (see Epilogue.specs)


def view_leaves(root: Node, where: str) -> list[Node]:
    """The nodes of `root` that read an HBM view (their views have the kernel output's logical dims)."""
    if has_reduce(root):
        raise CompilationError(f"{where}: a reduction in the epilogue of a convolution, pooling or gather is "
                               "not supported by the backend")
    return view_nodes(root)


def with_views(root: Node, leaves: list[Node], views: list[View]) -> Node:
    """`root` with the views of `leaves` (from view_leaves) replaced, in order."""
    return substitute_views(root, {id(n): v for n, v in zip(leaves, views, strict=True)})


def is_bare(root: Node) -> bool:
    """True when the epilogue is the accumulator itself (fp32 output, nothing fused)."""
    return root.op == "acc"


class Epilogue:
    """Evaluates `root` for tiles of at most [pmax, fmax] and stores the result."""

    def __init__(self, builder: ProgramBuilder, root: Node, out: View, p_axis: int, f_axis: int, label: str,
                 pmax: int, fmax: int, out_buffers: int, store_split: int | None = None):
        self.b, self.root, self.out, self.label = builder, root, out, label
        self.p_axis, self.f_axis = p_axis, f_axis
        self.pmax, self.fmax, self.out_buffers, self.store_split = pmax, fmax, out_buffers, store_split
        self.loader = LeafLoader(builder, root, p_axis, (f_axis,), label)
        self.temps = Temporaries("epi_temps", fmax)
        dry_leaves = {key: dry_operand(kind) for key, kind in self.loader.kinds().items()}
        coords = Coords(p_axis, 0, ((f_axis, 0, fmax),))
        # measured on full tiles and on one-column tiles (which make the accumulator and the destination look
        # like vectors to the evaluation), against destinations that cannot hold intermediates (a result written
        # in place into an on-chip image is not a scratch tile) in f32 and in the output's type (which a
        # narrowing convert at the root writes directly)
        for width in (fmax, 1):
            acc = AccessPattern("sbuf", "f32", 0, ((1, width),), partitions=pmax)
            for memory, dt in (("psum", "f32"), ("sbuf", self.out.dtype)):
                dry_dst = AccessPattern(memory, dt, 0, ((1, width),), partitions=pmax)
                self.temps.measure(lambda bb, store, d=dry_dst, a=acc, w=width: TileEvaluator(
                    bb, store, pmax, w, dry_leaves, acc=a, coords=coords).run(root, d))
        self.pools: dict[str, Pool] = {}

    def specs(self) -> list[PoolSpec]:
        # tiny result tiles (a global pool's one pixel per channel) each cost a store of ~3 us latency whatever
        # their size: enough buffers for SMALL_OUT_BUFS stores in flight (ResNet-50's pooled features: 16)
        size = self.fmax * itemsize(self.out.dtype)
        bufs = max(self.out_buffers, SMALL_OUT_BUFS) if size <= SMALL_OUT_BYTES else self.out_buffers
        return self.temps.specs() + [PoolSpec("epi_out", "sbuf", size, bufs)] + self.loader.specs(
            self.pmax, self.fmax, 2, LEAF_BUDGET)

    def bind(self, pools: dict[str, Pool]) -> None:
        self.pools = pools
        self.loader.bind(pools)
        self.temps.bind(pools)

    def out_buffer(self) -> Tile:
        """A fresh output buffer of [pmax, fmax] in the output dtype (a kernel with a bare epilogue
        accumulates straight into it, then calls `store`)."""
        return self.pools["epi_out"].next()

    def run(self, fixed: dict[int, int], p0: int, pw: int, f0: int, fw: int, acc: AccessPattern,
            label: str) -> None:
        """Evaluate the epilogue of the tile [p0:p0+pw, f0:f0+fw] from `acc` and store it (a result kept
        on chip, residency.py, is written in place where engines may: no store DMA)."""
        free = [(self.f_axis, f0, fw)]
        on_chip = self.b.resident(self.out.hbm_ap(self.p_axis, p0, pw, free, fixed))
        dst = on_chip or self.out_buffer().flat(self.out.dtype, pw, fw)
        operands = self.loader.load(fixed, p0, pw, free)
        coords = Coords(self.p_axis, p0, tuple(free), tuple(fixed.items()))
        TileEvaluator(self.b, self.temps.store(), pw, fw, operands, acc=acc, label=label, coords=coords).run(
            self.root, dst)
        if on_chip is None:
            self.store(fixed, p0, pw, f0, fw, dst, label)

    def run_ranges(self, fixed: dict[int, int], p0: int, pw: int, f0s: list[int], fw: int, acc: AccessPattern,
                   label: str) -> None:
        """A spread depthwise tile's results (conv_weights.spread_tiles): range a on partitions
        [a * pw, (a + 1) * pw) of `acc` holds the tile [p0:p0+pw, f0s[a]:f0s[a]+fw]. The epilogue (the
        accumulator or its conversion: it reads nothing else, so any partition may hold any channel) is
        evaluated once over every range, each range stored from its own partitions by DMA."""
        lanes = pw * len(f0s)
        dst = self.out_buffer().flat(self.out.dtype, lanes, fw)
        coords = Coords(self.p_axis, p0, ((self.f_axis, f0s[0], fw),), tuple(fixed.items()))
        TileEvaluator(self.b, self.temps.store(), lanes, fw, {}, acc=acc, label=label, coords=coords).run(
            self.root, dst)
        for a, f0 in enumerate(f0s):
            self.store(fixed, p0, pw, f0, fw, replace(dst, start_partition=a * pw, partitions=pw),
                       f"{label} range {a}")

    def store(self, fixed: dict[int, int], p0: int, pw: int, f0: int, fw: int, tile: AccessPattern,
              label: str) -> None:
        """Store a tile holding the final values of [p0:p0+pw, f0:f0+fw]."""
        self.b.dma(self.out.hbm_ap(self.p_axis, p0, pw, [(self.f_axis, f0, fw)], fixed), tile, f"{label} store",
                   split=self.store_split, min_run=512)
