"""Allocation choices that let consecutive kernels overlap: PSUM banks least recently handed out, a PSUM
budget that leaves the previous kernel's banks alone, and images of adjacent kernels in disjoint bytes."""

from __future__ import annotations

from backend.alloc import Allocator, PoolSpec
from backend.residency import Image, Survey, _place
from isa.target import load_target


def _allocator() -> tuple[Allocator, list[int]]:
    clock = [0]
    return Allocator(load_target("trn1"), lambda: clock[0]), clock


def _kernel(alloc: Allocator, clock: list[int], name: str, specs: list[PoolSpec], uses: dict[str, int]) -> dict:
    """One kernel: its pools, each pool's buffers last handed out at instruction `uses[pool]`."""
    pools = alloc.begin_kernel(name, specs, name)
    for pool_name, at in sorted(uses.items(), key=lambda kv: kv[1]):
        clock[0] = at
        pools[pool_name].next()
    clock[0] += 1
    alloc.end_kernel()
    return pools


def test_psum_banks_least_recently_used_go_first():
    alloc, clock = _allocator()
    # a dot: transposes early (banks 4..7), accumulators until its end (banks 0..3)
    first = _kernel(alloc, clock, "dot", [PoolSpec("acc", "psum", 0, 4), PoolSpec("tpsum", "psum", 0, 4)],
                    {"tpsum": 10, "acc": 100})
    assert first["acc"].offset == 0 and first["tpsum"].offset == 4 * alloc.bank_bytes
    assert alloc.psum_budget(alloc.banks // 2) == 4  # the last kernel took all 8: at least half
    second = _kernel(alloc, clock, "attention", [PoolSpec("s", "psum", 0, 2), PoolSpec("t", "psum", 0, 2)],
                     {"s": 150, "t": 150})
    assert second["s"].offset == 4 * alloc.bank_bytes  # the dot's transpose banks, free long before its end
    assert alloc.psum_budget(alloc.banks // 2) == 4


def test_images_of_adjacent_kernels_never_share_bytes():
    survey = Survey(needs=[0, 0, 0, 0], staged=[{}, {}, {}, {}])
    a = Image("a", "bf16", 512, 2304, 0, 1, 1)  # read last by kernel 1
    b = Image("b", "f32", 512, 768, 2, 3, 1)  # written from kernel 2, which starts while kernel 1 runs
    placed = _place([a, b], survey, 196608)
    assert placed is not None
    (pa,), (pb,) = ([i for i in placed if i.tensor == t] for t in ("a", "b"))
    assert pa.offset + pa.nbytes <= pb.offset or pb.offset + pb.nbytes <= pa.offset
