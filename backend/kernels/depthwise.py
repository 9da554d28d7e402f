"""Depthwise convolution taps split between the tensor engine and the other engines.

A depthwise convolution runs on PE as one matmul per tap with a diagonal stationary (conv.py): N PE
cycles per tap and output block, whatever the channel count, so PE is the bound of a 7x7 kernel while
ACT, DVE and GpSimd idle. Some taps are therefore computed off PE, per output block, as chains of
per-partition multiply-accumulates of shifted windows of the same input tile the matmuls read:

    ACT (or the chain's own engine): tmp = x[window of tap t] * w[channel, t]   (scale vector, one input)
    DVE or GpSimd:                   part = part + tmp                          (two inputs)

A chain starts with a tap covering the block whole (written straight into its fp32 accumulator) and
ends with one (its sum written in the compute dtype); its result joins the block's PSUM accumulation as
one more matmul by the identity. `plan_split` chooses how many taps each engine takes from the
machine model's costs (machine-model.md: PE max(N, 64) cycles per matmul at 2.8 GHz, 4x in fp32;
~N cycles per input tile plus ~60 of overhead on ACT/DVE/GpSimd at their clocks).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.layout import itemsize
from isa.program import AccessPattern
from isa.target import Target

ADDERS = ("dve", "pool")  # engines that accumulate a chain (two-input adds)


@dataclass(frozen=True)
class Chain:
    """Taps accumulated off PE by `adder`; `products[i]` is the engine multiplying tap `taps[i]`."""

    adder: str
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
    estimated time (None: all on PE). `full` lists the taps covering a block whole (chain ends), `clipped`
    the others, in the order to move them off PE. The ACT work of the epilogue (one pass per block) and the
    building of PE's diagonal stationaries (one [channels, channels] op per PE tap, spread) are counted."""
    pe_data = target.data["pe"]
    factor = pe_data["fp32_factor"] if compute == "f32" else 1
    mm = max(pixels, pe_data["min_interval"]) * factor / target.clock_ghz("pe")
    product = {e: _engine_ns(target, e, pixels, 1) for e in ("act", "dve", "pool")}
    add = {e: _engine_ns(target, e, pixels, 2, dependent=True) for e in ADDERS}
    diag = _engine_ns(target, "act", channels, 1) / 3 / max(1, blocks)  # per PE tap, per block, per engine
    epilogue = _engine_ns(target, "act", pixels, 1)
    best: tuple[float, TapSplit | None] = (taps * (mm + diag) + epilogue, None)
    if len(full) < 2:
        return None
    for d, q in itertools.product(range(taps), repeat=2):
        n_chains = (d > 0) + (q > 0)
        if d + q == 0 or d + q > taps - 1 or (d == 1 or q == 1) or 2 * n_chains > len(full) - 1:
            continue  # a chain has a full tap at each end; PE keeps a full tap to start its accumulations
        for own in range(q + 1):  # GpSimd's chain taps it multiplies itself (the rest on ACT)
            pe_taps = taps - d - q
            load = {"pe": (pe_taps + n_chains) * mm,
                    "act": (d + q - own) * product["act"] + epilogue + pe_taps * diag,
                    "dve": max(0, d - 1) * add["dve"] + pe_taps * diag,
                    "pool": max(0, q - 1) * add["pool"] + own * product["pool"] + pe_taps * diag}
            cost = max(load.values())
            if cost < best[0] - 1e-9:
                best = (cost, _split(taps, full, clipped, d, q, own))
    return best[1]


def _split(taps: int, full: list[int], clipped: list[int], d: int, q: int, own: int) -> TapSplit:
    """Chains of d (DVE) and q (GpSimd) taps: each starts and ends with a full tap, clipped taps between."""
    ends = list(full[1:])  # full[0] stays on PE: it starts the PSUM accumulations whole
    middle = list(clipped) + ends[2 * ((d > 0) + (q > 0)):]
    ends = ends[:2 * ((d > 0) + (q > 0))]
    chains = []
    for adder, n in (("dve", d), ("pool", q)):
        if n == 0:
            continue
        first, last = ends.pop(0), ends.pop(0)
        inner = [middle.pop(0) for _ in range(n - 2)]
        seq = (first, *inner, last)
        products = tuple("pool" if adder == "pool" and i < own else "act" for i in range(n))
        chains.append(Chain(adder, seq, products))
    off = {t for c in chains for t in c.taps}
    return TapSplit(frozenset(t for t in range(taps) if t not in off), tuple(chains))


# tap -> (source window, destination pattern, destination element offset), None when out of the block's reach
Window = Callable[[int], tuple[AccessPattern, tuple[tuple[int, int], ...], int] | None]


class OffPE:
    """Emits the chains of a TapSplit for one output block and gives their results as matmul operands."""

    def __init__(self, builder: ProgramBuilder, split: TapSplit, compute: str, limit: int, group: int, tag: str):
        self.b, self.split, self.compute, self.limit, self.tag = builder, split, compute, limit, tag
        self.bufs = 2 * group * len(split.chains)  # a group's chains while the previous group's are read
        self.pools: dict[str, Pool] = {}

    def specs(self) -> list[PoolSpec]:
        return [PoolSpec("dw_acc", "sbuf", self.limit * 4, self.bufs),
                PoolSpec("dw_tmp", "sbuf", self.limit * 4, 4),
                PoolSpec("dw_part", "sbuf", self.limit * itemsize(self.compute), self.bufs)]

    def bind(self, pools: dict[str, Pool]) -> None:
        self.pools = pools

    def emit(self, parts: int, size: int, window: Window, scale: Callable[[int], AccessPattern],
             label: str) -> list[Tile]:
        """The chains of one block of `size` pixels on `parts` partitions: their sums ([parts, size] in the
        compute dtype, to be matmul'd by the identity into the block's accumulator)."""
        results = []
        for chain in self.split.chains:
            acc, part = self.pools["dw_acc"].next(), self.pools["dw_part"].next()
            n = len(chain.taps)
            for i, (t, engine) in enumerate(zip(chain.taps, chain.products, strict=True)):
                found = window(t)
                if found is None:  # a clipped tap out of this block's reach (the ends cover every block)
                    continue
                src, pattern, offset = found
                comment = f"{label} tap {t} on {chain.adder}"
                if i == 0:  # a full tap: the accumulator's first value
                    self._product(engine, acc.ap("f32", parts, pattern, offset), src, scale(t), comment)
                    continue
                tmp = self.pools["dw_tmp"].next()
                self._product(engine, tmp.ap("f32", parts, pattern, offset), src, scale(t), comment)
                dst = part.flat(self.compute, parts, size) if i == n - 1 else acc.ap("f32", parts, pattern, offset)
                a = acc.flat("f32", parts, size) if i == n - 1 else acc.ap("f32", parts, pattern, offset)
                b = tmp.flat("f32", parts, size) if i == n - 1 else tmp.ap("f32", parts, pattern, offset)
                self.b.emit(chain.adder, "tensor_tensor", f"{comment} accumulate", {"op": "add"}, dst=dst, a=a, b=b)
            results.append(part)
        return results

    def _product(self, engine: str, dst: AccessPattern, src: AccessPattern, w: AccessPattern, comment: str) -> None:
        if engine == "act":
            self.b.activation(dst, src, "identity", scale_vec=w, comment=comment)
        else:
            self.b.emit(engine, "tensor_scalar", comment, {"op": "multiply", "scalar": 0.0}, dst=dst, src=src,
                        scalar_vec=w)
