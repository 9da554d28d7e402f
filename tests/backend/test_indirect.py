"""dynamic-slice, dynamic-update-slice, gather and scatter with runtime indices through the indirect DMA,
against the HLO interpreter: XLA's clamping (slices, gathers) and dropping (scatters) of out-of-range
indices, more than 128 rows, odd sizes, repeated scatter indices."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from hlo.interpreter import evaluate
from hlo.parser import parse_module
from tests.backend.util import BF16, rand, run_hlo


def check(text: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    got, result = run_hlo(text, list(inputs))  # s64 feeds stay int64 (the device keeps 8-byte integers)
    want = evaluate(parse_module(text), inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert any(i.opcode == "dma_indirect" for i in result.program.instructions)
    return got


DS = """HloModule ds
ENTRY %main (x: f32[300,7], s: s32[], t: s32[]) -> f32[200,5] {
  %x = f32[300,7] parameter(0)
  %s = s32[] parameter(1)
  %t = s32[] parameter(2)
  ROOT %y = f32[200,5] dynamic-slice(%x, %s, %t), dynamic_slice_sizes={200,5}
}
"""


@pytest.mark.parametrize("s,t", [(50, 2), (-5, 9), (250, -1), (100, 1)])
def test_dynamic_slice_clamps_starts(s, t):
    check(DS, [rand(300, 7), np.int32(s), np.int32(t)])


def test_dynamic_slice_rank1_and_rank3_bf16():
    text = """HloModule ds
ENTRY %main (x: f32[101], s: s32[]) -> f32[33] {
  %x = f32[101] parameter(0)
  %s = s32[] parameter(1)
  ROOT %y = f32[33] dynamic-slice(%x, %s), dynamic_slice_sizes={33}
}
"""
    for s in (0, 17, 90):
        check(text, [rand(101), np.int32(s)])
    text3 = """HloModule ds
ENTRY %main (x: bf16[4,30,6], a: s64[], b: s64[]) -> bf16[2,10,6] {
  %x = bf16[4,30,6] parameter(0)
  %a = s64[] parameter(1)
  %b = s64[] parameter(2)
  %z = s64[] constant(0)
  ROOT %y = bf16[2,10,6] dynamic-slice(%x, %a, %b, %z), dynamic_slice_sizes={2,10,6}
}
"""
    check(text3, [rand(4, 30, 6, dtype=BF16), np.int64(3), np.int64(13)])


DUS = """HloModule dus
ENTRY %main (x: f32[200,9], u: f32[150,9], s: s32[]) -> f32[200,9] {
  %x = f32[200,9] parameter(0)
  %u = f32[150,9] parameter(1)
  %s = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %y = f32[200,9] dynamic-update-slice(%x, %u, %s, %z)
}
"""


@pytest.mark.parametrize("s", [0, 31, 77, -4])
def test_dynamic_update_slice_more_than_128_rows(s):
    check(DUS, [rand(200, 9), rand(150, 9, seed=1), np.int32(s)])


def test_kv_cache_update_at_a_runtime_position():
    text = """HloModule kv
ENTRY %main (cache: f32[1,4,16,8], new: f32[1,4,1,8], pos: s32[]) -> f32[1,4,16,8] {
  %cache = f32[1,4,16,8] parameter(0)
  %new = f32[1,4,1,8] parameter(1)
  %pos = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %y = f32[1,4,16,8] dynamic-update-slice(%cache, %new, %z, %z, %pos, %z)
}
"""
    for pos in (0, 5, 15, 16):
        check(text, [rand(1, 4, 16, 8), rand(1, 4, 1, 8, seed=2), np.int32(pos)])


def scatter_text(combiner: str, dtype: str = "f32", rows: int = 50, n: int = 140, width: int = 6) -> str:
    if combiner == "add":
        body = f"  %b = {dtype}[] parameter(1)\n  ROOT %r = {dtype}[] add(%a, %b)"
    else:
        body = f"  ROOT %b = {dtype}[] parameter(1)"
    return f"""HloModule sc
%combine (a: {dtype}[], b: {dtype}[]) -> {dtype}[] {{
  %a = {dtype}[] parameter(0)
{body}
}}

ENTRY %main (x: {dtype}[{rows},{width}], i: s32[{n},1], u: {dtype}[{n},{width}]) -> {dtype}[{rows},{width}] {{
  %x = {dtype}[{rows},{width}] parameter(0)
  %i = s32[{n},1] parameter(1)
  %u = {dtype}[{n},{width}] parameter(2)
  ROOT %y = {dtype}[{rows},{width}] scatter(%x, %i, %u), update_window_dims={{1}}, inserted_window_dims={{0}}, \
scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%combine
}}
"""


@pytest.mark.parametrize("combiner", ["add", "replace"])
def test_row_scatter_drops_out_of_range_and_accumulates_repeats(combiner):
    idx = np.random.default_rng(3).integers(-4, 54, size=(140, 1)).astype(np.int32)
    if combiner == "replace":  # repeated indices: XLA leaves the winner unspecified; keep them unique
        idx = np.concatenate([np.arange(-4, 46), np.arange(46, 136)]).astype(np.int32).reshape(140, 1)
    check(scatter_text(combiner), [rand(50, 6), idx, rand(140, 6, seed=5)])


def test_integer_scatter_add_wraps():
    idx = np.array([[0], [2], [0], [7], [2]], dtype=np.int32)
    x = np.full((4, 3), 2**31 - 2, dtype=np.int32)
    u = np.arange(15, dtype=np.int32).reshape(5, 3)
    check(scatter_text("add", "s32", rows=4, n=5, width=3), [x, idx, u])


def test_scatter_with_two_index_dims():
    text = """HloModule sc
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}

ENTRY %main (x: f32[6,5,4], i: s32[10,2], u: f32[10,4]) -> f32[6,5,4] {
  %x = f32[6,5,4] parameter(0)
  %i = s32[10,2] parameter(1)
  %u = f32[10,4] parameter(2)
  ROOT %y = f32[6,5,4] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0,1}, \
scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%add
}
"""
    idx = np.random.default_rng(4).integers(-1, 7, size=(10, 2)).astype(np.int32)
    x, u = rand(6, 5, 4), rand(10, 4, seed=6)
    (got,) = check(text, [x, idx, u])
    want = x.copy()  # the interpreter masked each dim's index with a partial validity before (fixed)
    for (a, b), row in zip(idx, u, strict=True):
        if 0 <= a < 6 and 0 <= b < 5:
            want[a, b] += row
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_embedding_reads_only_the_rows_and_splits_large_rows():
    """An embedding of 4 KiB rows, more than 128 ids (with out-of-range ones): rows only, several transfers."""
    vocab, dim, n = 700, 1024, 150
    text = f"""HloModule emb
ENTRY %main (ids: s32[{n}], w: f32[{vocab},{dim}]) -> f32[{n},{dim}] {{
  %ids = s32[{n}] parameter(0)
  %w = f32[{vocab},{dim}] parameter(1)
  ROOT %y = f32[{n},{dim}] gather(%w, %ids), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, \
index_vector_dim=1, slice_sizes={{1,{dim}}}
}}
"""
    ids = np.random.default_rng(0).integers(-3, vocab + 3, size=n).astype(np.int32)
    w = rand(vocab, dim)
    (out,), result = run_hlo(text, [ids, w])
    np.testing.assert_array_equal(out, w[np.clip(ids, 0, vocab - 1)])
    program = result.program
    read = sum(i.operands["src"].nbytes for i in program.instructions if i.opcode == "dma_indirect")
    assert read == n * dim * 4  # the rows picked, not the table
    assert sum(i.opcode == "dma_indirect" for i in program.instructions) > 2


def test_pipeline_prefers_the_indirect_dma_over_selects():
    """Through every pass: the expanders leave dynamic-slice/DUS/scatter to the backend."""
    exe = compiler.compile(DUS, opt_level=2)
    ops = [i.opcode for i in exe.program.instructions]
    assert "dma_indirect" in ops and "select" not in ops
    x, u = rand(200, 9), rand(150, 9, seed=1)
    (got,) = exe.run(x, u, np.int32(60))
    want = x.copy()
    want[50:] = u  # 60 clamps to 200 - 150
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [7, 300])
def test_gather_with_two_index_dims(n):
    """x[i, j] with index arrays (jnp style): rows at clamped (i, j), more candidates than the expander takes."""
    text = f"""HloModule g
ENTRY %main (x: f32[40,30,5], i: s32[{n},2]) -> f32[{n},5] {{
  %x = f32[40,30,5] parameter(0)
  %i = s32[{n},2] parameter(1)
  ROOT %y = f32[{n},5] gather(%x, %i), offset_dims={{1}}, collapsed_slice_dims={{0,1}}, start_index_map={{0,1}}, \
index_vector_dim=1, slice_sizes={{1,1,5}}
}}
"""
    idx = np.random.default_rng(n).integers(-3, 43, size=(n, 2)).astype(np.int32)
    x = rand(40, 30, 5)
    (got,) = check(text, [x, idx])
    np.testing.assert_array_equal(got, x[np.clip(idx[:, 0], 0, 39), np.clip(idx[:, 1], 0, 29)])
