"""Depthwise convolution taps split between the tensor engine and the other engines.

A depthwise convolution runs on PE as one matmul per tap with a diagonal stationary (conv.py): N PE
cycles per tap and output block, whatever the channel count, so PE is the bound of a 7x7 kernel while
ACT, DVE and GpSimd idle. Some taps are therefore computed off PE, per output block, from the same input
tile the matmuls read, as per-partition products of shifted windows:

    ACT or GpSimd: prod[i] = x[window of tap t_i] * w[channel, t_i]   (scale/scalar vector: one input)

summed in one of two ways (machine-model.md: ~N cycles per input tile, ~60 of overhead per instruction):
- a *reduce* group: the products side by side in one buffer, summed by one DVE tensor_reduce over the tap
  axis (N cycles per tap); the columns a clipped tap does not reach are zeroed once per buffer;
- an *add* chain on DVE or GpSimd: part = part + prod (2N cycles per tap), starting and ending with a tap
  that covers the block whole.
Each group's sum (in the compute dtype) joins the block's PSUM accumulation as one more matmul by the
identity. Blocks of few pixels (ConvNeXt's stage 3: 7x7) take a third form, *singles*: every product joins
the accumulation by its own identity matmul. There PE's diagonal stationaries cost more than the taps' matmuls
(one [C, C] op per tap against N < C pixels), while a product costs N and the identity stays loaded.
`plan_split` chooses the groups from the machine model's costs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.layout import itemsize
from isa.program import AccessPattern
from isa.target import Target

PRODUCERS = ("act", "pool")  # engines multiplying a window by its tap weight (one input)
SINGLE_PRODUCERS = ("act", "pool", "dve")  # the same for singles (DVE sums nothing then)
# the other engines' estimated loads are scaled by this before they are compared with PE's: their chains wait on
# each other and share the engines with the scheduler's moves (ConvNeXt-tiny, trn1, bf16: 606.9 us at 1.0,
# 606.1 at 1.1, 608.4 at 1.2, 599.4 at 1.35, 605.5 at 1.5, 601.3 at 1.7)
ENGINE_MARGIN = 1.35
REDUCE_BUFS = 3
# blocks of fewer pixels stay on PE: there the fixed costs of the many small off-PE instructions (overhead,
# semaphore waits) outweigh PE's time (ConvNeXt's stage 3, 7x7 pixels: 599.4 -> 591.1 us on PE alone)
MIN_PIXELS = 128  # product buffers of reduce groups in rotation (one summed while the next fills)


@dataclass(frozen=True)
class Chain:
    """Taps summed off PE: `mode` "reduce" (DVE tensor_reduce of the products), "add" (a chain of adds
    on `engine`) or "single" (each product summed by PE, `engine` "pe"); `products[i]` is the engine
    multiplying tap `taps[i]`."""

    mode: str
    engine: str
    taps: tuple[int, ...]
    products: tuple[str, ...]


@dataclass(frozen=True)
class TapSplit:
    pe: frozenset[int]  # taps (kh * KW + kw) left to PE
    chains: tuple[Chain, ...]


def _engine_ns(target: Target, engine: str, elements: int, inputs: int, dependent: bool = False) -> float:
    stream = target.data["stream"]
    overhead = stream["dependent_overhead_cycles"] if dependent and engine in stream.get(
        "dependent_overhead_engines", ()) else stream["overhead_cycles"]
    return (elements * inputs + overhead) / target.clock_ghz(engine)


def plan_split(target: Target, taps: int, full: list[int], clipped: list[int], pixels: int, blocks: int,
               channels: int, compute: str) -> TapSplit | None:
    """The split of `taps` for `blocks` output blocks of `pixels` each that minimizes the busiest engine's
    estimated time (None: all on PE): a reduce group of r taps on DVE and an add chain of q taps on GpSimd,
    their products on the less loaded of ACT and GpSimd. `full` lists the taps covering a block whole (PE
    keeps the first, to start its accumulations; the add chain's ends are the next), `clipped` the others.
    The ACT work of the epilogue (one pass per block) and the building of PE's diagonal stationaries (one
    [channels, channels] op per PE tap, spread over three engines) are counted."""
    if pixels < MIN_PIXELS:
        return _plan_singles(target, taps, full, clipped, pixels, blocks, channels, compute)
    pe_data = target.data["pe"]
    factor = pe_data["fp32_factor"] if compute == "f32" else 1
    mm = max(pixels, pe_data["min_interval"]) * factor / target.clock_ghz("pe")
    product = {e: _engine_ns(target, e, pixels, 1) for e in PRODUCERS}
    add = _engine_ns(target, "pool", pixels, 2)
    per_tap = pixels / target.clock_ghz("dve")
    reduce_fixed = _engine_ns(target, "dve", 0, 1)
    diag = _engine_ns(target, "act", channels, 1) / 3 / max(1, blocks)  # per PE tap, per block, per engine
    epilogue = _engine_ns(target, "act", pixels, 1)
    best: tuple[float, tuple[int, int, int] | None] = (taps * (mm + diag) + epilogue, None)
    for r, q in itertools.product(range(taps), repeat=2):
        if r + q == 0 or r + q > taps - 1 or q == 1 or (q and len(full) < 3) or r == 1:
            continue
        groups = (r > 0) + (q > 0)
        on_pe = taps - r - q
        for own in range(r + q + 1):  # products on GpSimd (the rest on ACT)
            load = {"pe": (on_pe + groups) * mm,
                    "act": (r + q - own) * product["act"] + epilogue + on_pe * diag,
                    "dve": (r * per_tap + reduce_fixed if r else 0.0) + on_pe * diag,
                    "pool": max(0, q - 1) * add + own * product["pool"] + on_pe * diag}
            cost = max(load["pe"], ENGINE_MARGIN * max(load["act"], load["dve"], load["pool"]))
            if cost < best[0] - 1e-9:
                best = (cost, (r, q, own))
            if load["pool"] >= load["act"]:  # past the balance: moving more products only loads GpSimd
                break
    if best[1] is None:
        return None
    return _split(taps, full, clipped, *best[1])


def _plan_singles(target: Target, taps: int, full: list[int], clipped: list[int], pixels: int, blocks: int,
                  channels: int, compute: str) -> TapSplit | None:
    """Small blocks: every tap a single product joined by PE (products spread over ACT, GpSimd and DVE, each
    to the engine it leaves least loaded), when that beats PE alone with its diagonal stationaries."""
    pe_data = target.data["pe"]
    factor = pe_data["fp32_factor"] if compute == "f32" else 1
    mm = max(pixels, pe_data["min_interval"]) * factor / target.clock_ghz("pe")
    epilogue = _engine_ns(target, "act", pixels, 1)
    diag = sum(_engine_ns(target, e, channels, 1) for e in SINGLE_PRODUCERS) / 9 / max(1, blocks)
    alone = max(taps * mm, ENGINE_MARGIN * (taps * diag + epilogue))
    load = {"act": epilogue, "pool": 0.0, "dve": 0.0}
    products = []
    for _ in range(taps):
        engine = min(SINGLE_PRODUCERS, key=lambda e: load[e] + _engine_ns(target, e, pixels, 1))
        load[engine] += _engine_ns(target, engine, pixels, 1)
        products.append(engine)
    if max(taps * mm, ENGINE_MARGIN * max(load.values())) >= alone:
        return None
    order = (*full, *clipped)  # a full tap first: its matmul starts the accumulation
    return TapSplit(frozenset(), (Chain("single", "pe", order, tuple(products)),))


def _split(taps: int, full: list[int], clipped: list[int], r: int, q: int, own: int) -> TapSplit:
    """A reduce group of r taps (clipped ones first) and an add chain of q taps (full ends, clipped between)."""
    ends = list(full[1:3]) if q else []
    rest = list(clipped) + [t for t in full[1:] if t not in ends]
    chains = []
    if q:
        inner = [rest.pop(0) for _ in range(q - 2)]
        seq = (ends[0], *inner, ends[1])
        chains.append(Chain("add", "pool", seq, tuple("pool" if i < own else "act" for i in range(q))))
        own = max(0, own - q)
    if r:
        seq = tuple(rest.pop(0) for _ in range(r))
        chains.append(Chain("reduce", "dve", seq, tuple("pool" if i < own else "act" for i in range(r))))
    off = {t for c in chains for t in c.taps}
    return TapSplit(frozenset(t for t in range(taps) if t not in off), tuple(chains))


# a sum to join a block's accumulation: (tile, pattern, element offset) of the part of the block it covers
Part = tuple[Tile, tuple[tuple[int, int], ...], int]
# tap -> (source window, destination pattern, destination element offset), None when out of the block's reach
Window = Callable[[int], tuple[AccessPattern, tuple[tuple[int, int], ...], int] | None]


class OffPE:
    """Emits the groups of a TapSplit for one output block and gives their sums as matmul operands."""

    def __init__(self, builder: ProgramBuilder, split: TapSplit, compute: str, limit: int, group: int, tag: str):
        self.b, self.split, self.compute, self.limit, self.tag = builder, split, compute, limit, tag
        # a group's sums while the previous group's are read
        self.bufs = 2 * group * sum(len(c.taps) if c.mode == "single" else 1 for c in split.chains)
        self.width = max((len(c.taps) for c in split.chains if c.mode == "reduce"), default=0)
        self.pools: dict[str, Pool] = {}
        # (product buffer, slot) -> the (size, pattern, offset) of the clipped product whose complement is zero
        self._zeroed: dict[tuple[int, int], tuple | None] = {}

    def specs(self) -> list[PoolSpec]:
        specs = [PoolSpec("dw_part", "sbuf", self.limit * itemsize(self.compute), self.bufs)]
        if any(c.mode == "add" for c in self.split.chains):
            specs += [PoolSpec("dw_acc", "sbuf", self.limit * 4, self.bufs),
                      PoolSpec("dw_tmp", "sbuf", self.limit * 4, 4)]
        if self.width:
            specs.append(PoolSpec("dw_prod", "sbuf", self.width * self.limit * itemsize(self.compute), REDUCE_BUFS))
        return specs

    def bind(self, pools: dict[str, Pool]) -> None:
        self.pools = pools

    def emit(self, parts: int, size: int, window: Window, scale: Callable[[int], AccessPattern],
             label: str) -> list[Part]:
        """The groups of one block of `size` pixels on `parts` partitions: their sums ([parts, size] in the
        compute dtype, to be matmul'd by the identity into the block's accumulator), as (tile, pattern,
        element offset) of the part of the block each covers (a single's clipped window, else the block)."""
        results = []
        whole = ((1, size),)
        for chain in self.split.chains:
            if chain.mode == "single":
                for t, engine in zip(chain.taps, chain.products, strict=True):
                    found = window(t)
                    if found is None:  # out of this block's reach
                        continue
                    src, pattern, offset = found
                    part = self.pools["dw_part"].next()
                    self._product(engine, part.ap(self.compute, parts, pattern, offset), src, scale(t),
                                  f"{label} tap {t} single")
                    results.append((part, pattern, offset))
                continue
            part = self.pools["dw_part"].next()
            if chain.mode == "reduce":
                self._reduce(chain, part, parts, size, window, scale, label)
            else:
                self._chain(chain, part, parts, size, window, scale, label)
            results.append((part, whole, 0))
        return results

    def _reduce(self, chain: Chain, part: Tile, parts: int, size: int, window: Window,
                scale: Callable[[int], AccessPattern], label: str) -> None:
        prod = self.pools["dw_prod"].next()
        cdt, k = self.compute, len(chain.taps)
        for i, (t, engine) in enumerate(zip(chain.taps, chain.products, strict=True)):
            found = window(t)
            base = i * self.limit
            slot = (id(prod), i)
            if found is None:  # out of this block's reach: a zero slot
                self.b.emit("pool", "memset", f"{label} tap {t} zero", {"value": 0.0},
                            dst=prod.flat(cdt, parts, size, base))
                self._zeroed[slot] = None
                continue
            src, pattern, offset = found
            key = (size, pattern, offset)
            if free_elements(pattern) == size:
                self._zeroed[slot] = None  # written whole
            elif self._zeroed.get(slot) != key:  # zero once what this clipped tap never writes in this buffer
                for rest, at in _complement(pattern, offset, size):
                    self.b.emit("pool", "memset", f"{label} tap {t} zero columns", {"value": 0.0},
                                dst=prod.ap(cdt, parts, rest, base + at))
                self._zeroed[slot] = key
            self._product(engine, prod.ap(cdt, parts, pattern, base + offset), src, scale(t), f"{label} tap {t}")
        self.b.emit("dve", "tensor_reduce", f"{label} sum of {k} taps", {"op": "add", "axes": "0"},
                    dst=part.flat(cdt, parts, size), src=prod.ap(cdt, parts, ((self.limit, k), (1, size))))

    def _chain(self, chain: Chain, part: Tile, parts: int, size: int, window: Window,
               scale: Callable[[int], AccessPattern], label: str) -> None:
        acc = self.pools["dw_acc"].next()
        n = len(chain.taps)
        for i, (t, engine) in enumerate(zip(chain.taps, chain.products, strict=True)):
            found = window(t)
            if found is None:  # a clipped tap out of this block's reach (the ends cover every block)
                continue
            src, pattern, offset = found
            comment = f"{label} tap {t} on {chain.engine}"
            if i == 0:  # a full tap: the accumulator's first value
                self._product(engine, acc.ap("f32", parts, pattern, offset), src, scale(t), comment)
                continue
            tmp = self.pools["dw_tmp"].next()
            self._product(engine, tmp.ap("f32", parts, pattern, offset), src, scale(t), comment)
            last = i == n - 1
            dst = part.flat(self.compute, parts, size) if last else acc.ap("f32", parts, pattern, offset)
            a = acc.flat("f32", parts, size) if last else acc.ap("f32", parts, pattern, offset)
            b = tmp.flat("f32", parts, size) if last else tmp.ap("f32", parts, pattern, offset)
            self.b.emit(chain.engine, "tensor_tensor", f"{comment} accumulate", {"op": "add"}, dst=dst, a=a, b=b)

    def _product(self, engine: str, dst: AccessPattern, src: AccessPattern, w: AccessPattern, comment: str) -> None:
        if engine == "act":
            self.b.activation(dst, src, "identity", scale_vec=w, comment=comment)
        else:
            self.b.emit(engine, "tensor_scalar", comment, {"op": "multiply", "scalar": 0.0}, dst=dst, src=src,
                        scalar_vec=w)


def free_elements(pattern: tuple[tuple[int, int], ...]) -> int:
    return prod(count for _, count in pattern)


def _complement(pattern: tuple[tuple[int, int], ...], offset: int, size: int
                ) -> list[tuple[tuple[tuple[int, int], ...], int]]:
    """(pattern, offset) pieces of a block of `size` that a tap's window (`pattern` at `offset`: rows of
    a run of columns, conv.py's _window) does not cover."""
    run = pattern[-1][1]
    if len(pattern) == 1:
        return [(((1, n),), at) for at, n in ((0, offset), (offset + run, size - offset - run)) if n > 0]
    (stride, rows), = pattern[:-1]
    return [(((stride, rows), (1, n)), at) for at, n in ((0, offset), (offset + run, stride - offset - run)) if n > 0]
