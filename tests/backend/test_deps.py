"""deps.py: every pair of conflicting accesses stays ordered (directly or through other instructions) while
writes retire or trim the records they hide, and the edge count stays small on row-by-row reloads."""

from __future__ import annotations

import numpy as np

from backend.deps import dependencies
from backend.kernels.operands import _group_blocks, _tile_blocks
from isa.program import AccessPattern, Instruction


def _sbuf(p0: int, parts: int, lo: int, n: int) -> AccessPattern:
    return AccessPattern("sbuf", "f32", lo, ((1, n),), start_partition=p0, partitions=parts)


def _hbm(offset: int, rows: int, width: int, pitch: int) -> AccessPattern:
    return AccessPattern("hbm", "f32", offset, ((1, width),), partitions=rows, tensor="t", partition_stride=pitch)


def _footprint(ap: AccessPattern) -> set[tuple[int, int]]:
    """(partition, byte) pairs on chip; (0, byte) in HBM: the exact bytes an access touches."""
    if ap.memory == "hbm":
        return {(0, ap.offset + 4 * (r * ap.partition_stride + c))
                for r in range(ap.partitions) for c in range(ap.free_size)}
    return {(p, ap.offset + 4 * c) for p in range(ap.start_partition, ap.start_partition + ap.partitions)
            for c in range(ap.free_size)}


def _assert_ordered(ops: list[Instruction], preds: list[list[int]]) -> None:
    """Every two instructions whose accesses of one space overlap, one of them writing, are ordered."""
    reach = []  # bit j of reach[i]: j precedes i
    for ps in preds:
        bits = 0
        for p in ps:
            bits |= reach[p] | (1 << p)
        reach.append(bits)
    accesses = []
    for inst in ops:
        acc = []
        for name, ap in inst.operands.items():
            if ap.memory == "hbm" or name == "dst" or inst.opcode == "dma":
                acc.append((ap.memory, _footprint(ap), name == "dst"))
            else:
                acc.append((ap.memory, _footprint(ap), False))
        accesses.append(acc)
    for i in range(len(ops)):
        for j in range(i):
            if any(si == sj and (wi or wj) and fi & fj for si, fi, wi in accesses[i] for sj, fj, wj in accesses[j]):
                assert reach[i] >> j & 1, f"instruction {i} is not ordered after {j}"


def test_row_by_row_reload_keeps_order_with_few_edges():
    """Reads of a whole [16 x 512 B] buffer, then a reload one partition at a time, eight rounds: each
    reload row depends on the reads through the rows before it, not on every read ever made."""
    ops = []
    for _ in range(8):
        for k in range(6):
            ops.append(Instruction("dve", "tensor_scalar", {"dst": _sbuf(0, 16, 4096 + 64 * k, 16),
                                                            "src": _sbuf(0, 16, 0, 128)}, {"op": "add", "scalar": 1.0}))
        for p in range(16):
            ops.append(Instruction("sp", "dma", {"dst": _sbuf(p, 1, 0, 128), "src": _hbm(512 * p, 1, 128, 128)}))
    preds = dependencies(ops, {"t"})
    _assert_ordered(ops, preds)
    assert max(len(p) for p in preds) <= 17, max(len(p) for p in preds)  # a read after its 16 rows


def test_random_accesses_stay_ordered():
    rng = np.random.default_rng(7)
    ops = []
    for _ in range(160):
        kind = rng.integers(3)
        if kind == 0:  # on chip: random boxes, read and written
            p0, lo = int(rng.integers(0, 12)), int(rng.integers(0, 24)) * 16
            src = _sbuf(p0, int(rng.integers(1, 16 - p0 + 1)), lo, int(rng.integers(1, 16)))
            p1 = int(rng.integers(0, 12))
            dst = _sbuf(p1, int(rng.integers(1, 16 - p1 + 1)), int(rng.integers(0, 24)) * 16, int(rng.integers(1, 16)))
            ops.append(Instruction("dve", "tensor_scalar", {"dst": dst, "src": src}, {"op": "add", "scalar": 1.0}))
        else:  # HBM column tiles of a [8 x 64] f32 matrix (one period) or whole rows, loaded or stored
            width = int(rng.choice([8, 16, 64]))
            col = int(rng.integers(0, 64 // width)) * width
            rows = int(rng.integers(1, 9))
            r0 = int(rng.integers(0, 9 - rows))
            hbm = _hbm(4 * (64 * r0 + col), rows, width, 64)
            box = _sbuf(0, rows, int(rng.integers(0, 8)) * 64, width)
            ops.append(Instruction("sp", "dma", {"dst": hbm, "src": box} if kind == 1 else {"dst": box, "src": hbm}))
    preds = dependencies(ops, set())
    _assert_ordered(ops, preds)


def test_reads_of_one_box_share_a_record():
    """Reads of one exact box are one record (deps._Space.more): a later write still follows every one of them,
    also after a write trimmed the box at one end, and random reads and writes over a few boxes stay ordered."""
    box, other = _sbuf(0, 16, 0, 32), _sbuf(0, 16, 256, 32)
    ops = [Instruction("dve", "tensor_scalar", {"dst": other, "src": box}, {"op": "add", "scalar": 1.0})
           for _ in range(3)]
    ops.append(Instruction("sp", "dma", {"dst": _sbuf(0, 16, 64, 16), "src": _hbm(0, 16, 16, 16)}))  # cuts the end
    ops.append(Instruction("dve", "tensor_scalar", {"dst": box, "src": other}, {"op": "add", "scalar": 1.0}))
    preds = dependencies(ops, {"t"})
    assert preds[4] == [0, 1, 2, 3], preds
    rng = np.random.default_rng(11)
    boxes = [_sbuf(0, 16, 0, 32), _sbuf(0, 16, 64, 16), _sbuf(4, 8, 0, 64), _sbuf(0, 4, 96, 32), _sbuf(0, 16, 128, 32)]
    ops = []
    for _ in range(200):
        dst, src = (boxes[int(k)] for k in rng.integers(0, len(boxes), 2))
        ops.append(Instruction("dve", "tensor_scalar", {"dst": dst, "src": src}, {"op": "add", "scalar": 1.0}))
    _assert_ordered(ops, dependencies(ops, set()))


def _tiled_reference(arr: np.ndarray, block: int, parts: int) -> np.ndarray:
    """TiledConst's layout element by element: per batch, per column block, [parts][K // parts][w] then the
    [K % parts][w] rest."""
    out = []
    K, C = arr.shape[-2:]
    full = K // parts
    for mat in arr.reshape(-1, K, C):
        for b0 in range(0, C, block):
            blk = mat[:, b0:b0 + block]
            out += [blk[f * parts + p] for p in range(parts) for f in range(full)]
            out += [blk[full * parts + r] for r in range(K % parts)]
    return np.concatenate(out)


def test_grouped_blocks_interleave_by_partition():
    """TiledConst.group: runs of `group` blocks are [parts][blocks][K-tiles][w], the last run shorter."""
    rng = np.random.default_rng(1)
    parts, block, group = 16, 8, 3
    for shape in ((32, 60), (2, 48, 24)):
        a = rng.standard_normal(shape).astype(np.float32)
        K, C = shape[-2:]
        full = K // parts
        expected = []
        for mat in a.reshape(-1, K, C):
            for g0 in range(0, C, block * group):
                starts = range(g0, min(C, g0 + block * group), block)
                expected += [mat[f * parts + p, b0:min(C, b0 + block)]
                             for p in range(parts) for b0 in starts for f in range(full)]
        flat = _tile_blocks(a, "f32", block, parts)
        assert np.array_equal(_group_blocks(flat, K, C, block, group, parts), np.concatenate(expected))


def test_transposed_weights_tile_like_contiguous_ones():
    rng = np.random.default_rng(0)
    for shape, block in (((300, 200), 96), ((2, 260, 70), 32), ((128, 40), 16), ((40, 50), 16)):
        a = rng.standard_normal(shape).astype(np.float32)
        transposed = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)  # nn.Linear's weight.T
        expected = _tiled_reference(a, block, 16)
        for arr in (a, transposed):
            assert np.array_equal(_tile_blocks(arr, "f32", block, 16), expected)
