"""Cross-kernel weight prefetch: the allocator places pools filled once from constants (resident convolution
weights, a classifier's whole stationary) apart, where SBUF was used longest ago, and a kernel's other pools
where it was used most recently but not by the last BLOCK_AVOID kernels, so that a weight load waits only for
kernels long done. Checked end to end on a chain of convolutions (checked mode: races, uninitialized reads)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from backend.alloc import BLOCK_AVOID, PERSISTENT_GUARD, Allocator, PoolSpec
from hlo.errors import CompilationError
from isa.target import load_target
from tests.backend.test_conv_chains import BF16_REL, ConvBnRelu, _check

KIB = 1024


def _allocator() -> tuple[Allocator, list[int]]:
    clock = [0]
    return Allocator(load_target("trn1"), lambda: clock[0]), clock


def _spans(pools: dict) -> list[tuple[int, int]]:
    return [(p.offset, p.offset + p.nbytes) for p in pools.values() if p.memory == "sbuf"]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(lo < h and l2 < hi for lo, hi in a for l2, h in b)


def test_weights_go_where_sbuf_was_used_longest_ago():
    alloc, clock = _allocator()
    used: list[list[tuple[int, int]]] = []  # per kernel: the SBUF it took
    for k in range(24):
        pools = alloc.begin_kernel(f"k{k}", [PoolSpec("x", "sbuf", 12 * KIB, 2),
                                             PoolSpec("w", "sbuf", 10 * KIB, 1, prefetch=True)], f"k{k}")
        clock[0] += 10
        alloc.end_kernel()
        weight = _spans({"w": pools["w"]})
        block = _spans({"x": pools["x"]})
        assert not _overlap(weight, block)
        # the rest of the kernel avoids the last BLOCK_AVOID kernels' SBUF (they may still run) ...
        assert not any(_overlap(block, u) for u in used[-BLOCK_AVOID:])
        # ... and a weight the SBUF of many earlier kernels: the blocks take BLOCK_AVOID + 1 places, the weights
        # turn round the rest (~ (192 - 8 - 2 * 24) / 10 kernels); a ring of whole kernels holds ~5
        assert not any(_overlap(weight, u) for u in used[-12:])
        used.append(weight + block)


def test_pools_fall_back_to_one_block_when_they_do_not_fit_apart():
    alloc, clock = _allocator()
    capacity = alloc.sbuf_capacity()
    pools = alloc.begin_kernel("big", [PoolSpec("x", "sbuf", capacity - 64 * KIB, 1),
                                       PoolSpec("w", "sbuf", 60 * KIB, 1, prefetch=True)], "big")
    alloc.end_kernel()
    assert pools["w"].offset == pools["x"].offset + pools["x"].nbytes  # one block, as before


def test_a_persistent_buffer_never_lands_on_the_open_kernel():
    alloc, clock = _allocator()
    pools = alloc.begin_kernel("k0", [PoolSpec("w", "sbuf", 16 * KIB, 1, prefetch=True)], "k0")
    assert pools["w"].offset + pools["w"].nbytes <= alloc.sbuf_bytes - PERSISTENT_GUARD
    ident = alloc.persistent("identity_bf16", 256)
    assert ident.offset >= pools["w"].offset + pools["w"].nbytes
    alloc.end_kernel()
    # a block placed up to the top (the fallback) and a persistent buffer taken inside it: refused, not shared
    alloc2, _ = _allocator()
    alloc2.begin_kernel("full", [PoolSpec("x", "sbuf", alloc2.sbuf_capacity(), 1)], "full")
    with pytest.raises(CompilationError, match="persistent buffer ones_f32 would overlap"):
        alloc2.persistent("ones_f32", 4)


def test_conv_chain_weights_share_no_sbuf_with_the_kernels_before():
    torch.manual_seed(0)
    model = nn.Sequential(*(ConvBnRelu(256, 256, 3) for _ in range(8)))
    exe = _check(model, torch.randn(1, 256, 28, 28), BF16_REL)
    spans: dict[str, list[tuple[str, int, int]]] = {}  # kernel -> (buffer, first byte, end) of its SBUF pools
    for line in exe.reports["memory_plan.txt"].splitlines():
        cells = line.split()
        if len(cells) >= 7 and cells[0].startswith("k") and cells[2] == "sbuf":
            spans.setdefault(cells[0], []).append((cells[1], int(cells[3]), int(cells[3]) + int(cells[6])))
    convs = [k for k, pools in spans.items() if any(name == "w" for name, _, _ in pools)]
    assert len(convs) == 8
    for n, kernel in enumerate(convs):
        (w,) = [(lo, hi) for name, lo, hi in spans[kernel] if name == "w"]
        for before in convs[max(0, n - 6):n]:  # its load waits for none of the 6 convolutions before it
            assert not _overlap([w], [(lo, hi) for _, lo, hi in spans[before]]), (kernel, before)
