"""Gather kernels (embedding, index_select): one-hot matmuls, bit-exact rows, XLA's index clamping."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import CompilationError
from hlo.interpreter import evaluate
from hlo.parser import parse_module
from tests.backend.util import BF16, rand, run_hlo, shape


def embedding_text(vocab: int, dim: int, ids: tuple[int, ...], dtype: str = "f32", table: str = "constant") -> str:
    k = len(ids)
    out = shape(dtype, (*ids, dim))
    params = f"ids: {shape('s32', ids)}" + (f", w: {shape(dtype, (vocab, dim))}" if table == "parameter" else "")
    w_line = (f"  %w = {shape(dtype, (vocab, dim))} parameter(1)" if table == "parameter"
              else f'  %w = {shape(dtype, (vocab, dim))} constant({{...}}), data="w"')
    return f"""HloModule embedding
ENTRY %main ({params}) -> {out} {{
  %ids = {shape('s32', ids)} parameter(0)
{w_line}
  ROOT %y = {out} gather(%w, %ids), offset_dims={{{k}}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, \
index_vector_dim={k}, slice_sizes={{1,{dim}}}
}}
"""


def ids_for(vocab: int, dims: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Indices in range plus a few out of range (XLA clamps them to the first/last row)."""
    return np.random.default_rng(seed).integers(-3, vocab + 3, size=dims).astype(np.int32)


@pytest.mark.parametrize("vocab,dim,ids", [
    (50, 64, (7,)),             # one tile of everything
    (300, 700, (2, 70)),        # 3 vocab tiles, 2 column groups, 2-D ids (140 rows: 2 index tiles)
    (1000, 2100, (5,)),         # table too large to stay resident: streamed per vocab tile
], ids=["small", "tiles", "streamed"])
def test_embedding_f32_exact(vocab, dim, ids):
    w, idx = rand(vocab, dim, seed=1), ids_for(vocab, ids)
    text = embedding_text(vocab, dim, ids)
    (out,), result = run_hlo(text, [idx], {"w": w})
    np.testing.assert_array_equal(out, w[np.clip(idx, 0, vocab - 1)])
    np.testing.assert_array_equal(out, evaluate(parse_module(text, constants={"w": w}), [idx])[0])
    assert result.program.meta["useful_macs"] == 0  # a gather does no useful arithmetic


def test_embedding_bf16_table():
    vocab, dim = 1000, 96
    w, idx = rand(vocab, dim, seed=2, dtype=BF16), ids_for(vocab, (130,), seed=1)
    (out,), _ = run_hlo(embedding_text(vocab, dim, (130,), "bf16"), [idx], {"w": w})
    assert out.dtype == BF16
    np.testing.assert_array_equal(out, w[np.clip(idx, 0, vocab - 1)])


def test_table_as_parameter_with_cast():
    """A runtime f32 table converted to bf16 before the gather: loaded, cast on chip, gathered."""
    vocab, dim = 200, 40
    text = embedding_text(vocab, dim, (9,), "bf16", table="parameter")
    text = text.replace("w: bf16[200,40]", "w: f32[200,40]").replace(
        "  %w = bf16[200,40] parameter(1)", "  %w32 = f32[200,40] parameter(1)\n  %w = bf16[200,40] convert(%w32)")
    w, idx = rand(vocab, dim, seed=3), ids_for(vocab, (9,), seed=2)
    (out,), _ = run_hlo(text, [idx, w])
    np.testing.assert_array_equal(out, w.astype(BF16)[np.clip(idx, 0, vocab - 1)])


def test_index_select_rows_of_a_3d_operand():
    """index_select along dim 0 of [V, 4, 6]: rows of 24 elements, ids with an explicit index vector dim."""
    text = """HloModule m
ENTRY %main (ids: s32[5,1]) -> f32[5,4,6] {
  %ids = s32[5,1] parameter(0)
  %x = f32[30,4,6] constant({...}), data="x"
  ROOT %y = f32[5,4,6] gather(%x, %ids), offset_dims={1,2}, collapsed_slice_dims={0}, start_index_map={0}, \
index_vector_dim=1, slice_sizes={1,4,6}
}
"""
    x, idx = rand(30, 4, 6, seed=4), ids_for(30, (5, 1), seed=3)
    (out,), _ = run_hlo(text, [idx], {"x": x})
    np.testing.assert_array_equal(out, x[np.clip(idx[:, 0], 0, 29)])


def test_partial_slices_are_refused_with_the_instruction_named():
    text = """HloModule m
ENTRY %main (ids: s32[3]) -> f32[3,8] {
  %ids = s32[3] parameter(0)
  %x = f32[20,16] constant({...}), data="x"
  ROOT %g = f32[3,8] gather(%x, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, \
index_vector_dim=1, slice_sizes={1,8}
}
"""
    with pytest.raises(CompilationError, match=r"%g \(gather\).*partial slices"):
        run_hlo(text, [np.zeros(3, np.int32)], {"x": rand(20, 16)})
