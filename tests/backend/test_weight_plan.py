"""The whole-program plan of the weights' SBUF regions (backend/weight_plan.py) and the allocator following it."""

from __future__ import annotations

from backend.alloc import Allocator, PoolSpec
from backend.residency import Image
from backend.weight_plan import KernelShape, plan_weights, queue_bound
from isa.target import load_target

KIB = 1024
TOP = 184 * KIB


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _chain() -> list[KernelShape]:
    """Six small compute kernels (8 KiB of pools each), then four with 36 KiB of weights each."""
    return [KernelShape(0, 8 * KIB)] * 6 + [KernelShape(36 * KIB, 16 * KIB)] * 4


def test_regions_start_early_and_never_share_sbuf_while_both_are_kept():
    image = Image("s0", "bf16", 128, 4096, 0, 9, saved=1, offset=TOP - 8 * KIB)  # 8 KiB live throughout
    plan = plan_weights(_chain(), [image], TOP)
    assert [r.kernel for r in plan] == [6, 7, 8, 9]
    # 184 - 8 (image) = 176 KiB: four 36 KiB regions fit beside the small kernels' 16 KiB (theirs and the
    # previous one's), so every region is kept from the program's start
    assert all(r.first == 0 for r in plan)
    for r in plan:
        assert not _overlap(r.span, (image.offset, image.offset + image.nbytes))
        assert r.offset + r.nbytes <= TOP
    for a in plan:
        for b in plan:
            if a is not b and a.first <= b.kernel and b.first <= a.kernel:
                assert not _overlap(a.span, b.span)


def test_a_region_waits_for_room_when_the_sbuf_is_full():
    shapes = [KernelShape(0, 100 * KIB)] * 3 + [KernelShape(0, 8 * KIB)] * 3 + [KernelShape(96 * KIB, 8 * KIB)]
    (r,) = plan_weights(shapes, [], TOP)
    # the 100 KiB kernels leave no 96 KiB beside their blocks, nor does kernel 3 beside its own block and the
    # last 100 KiB one's (still running as kernel 3 starts)
    assert r.kernel == 6 and r.first == 4


def test_queue_bound_when_the_weights_outrun_the_queues():
    shapes = [KernelShape(0, 8 * KIB)] * 4 + [KernelShape(36 * KIB, 8 * KIB)] * 2
    per_byte = 128 / 17.0  # ns of one queue per weight byte per partition
    weight_ns = 36 * KIB * per_byte  # ~17 us of 16 queues each
    idle = [0.0] * 6
    # long compute kernels: the queues have room to load the weights ahead
    assert not queue_bound(shapes, [weight_ns / 8] * 6, idle, 16, per_byte)
    # short ones: no earlier start gets the weights in on time (the plan is not made)
    assert queue_bound(shapes, [weight_ns / 64] * 6, idle, 16, per_byte)
    # busy queues (other transfers filling the long kernels' time) count against the room
    assert queue_bound(shapes, [weight_ns / 8] * 6, [weight_ns / 8 * 16] * 6, 16, per_byte)


def test_allocator_follows_the_plan_and_keeps_other_pools_out():
    shapes = _chain()
    plan = plan_weights(shapes, [], TOP)
    clock = [0]
    alloc = Allocator(load_target("trn1"), lambda: clock[0])
    alloc.reserve(plan)
    placed = {}
    for k, shape in enumerate(shapes):
        specs = [PoolSpec("x", "sbuf", shape.rest, 1)]
        if shape.ahead:
            specs.append(PoolSpec("w", "sbuf", shape.ahead, 1, prefetch=True))
        pools = alloc.begin_kernel(f"k{k}", specs, f"k{k}")
        clock[0] += 10
        alloc.end_kernel()
        placed[k] = pools
    for r in plan:
        assert placed[r.kernel]["w"].offset == r.offset
        for k in range(r.first, r.kernel):  # no other pool in the region while it is kept
            for pool in placed[k].values():
                assert not _overlap(r.span, (pool.offset, pool.offset + pool.nbytes))
    assert "weights' regions planned" in alloc.memory_plan()
