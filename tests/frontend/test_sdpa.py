"""scaled_dot_product_attention against eager torch, rows whose mask hides every key included.

torch's SDPA is a safe softmax: a row whose scores are all -inf (every key masked) gives 0, in every dtype.
The frontend writes it as exp(x - max(m, lowest)) / max(sum, 1); the attention fusion still matches it and
the flash kernel divides by max(l, 1), so the fused and the unfused program both give 0 there."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import compiler
from tests.conftest import assert_close


class Sdpa(nn.Module):
    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class EagerSoftmax(nn.Module):
    """HF's eager attention: a finfo.min mask added, plain softmax (a fully masked row is uniform)."""

    def forward(self, q, k, v, mask):
        return torch.softmax((q @ k.transpose(-1, -2)) * 0.125 + mask, -1) @ v


def _mask(kind: str, tq: int, tk: int, dtype: torch.dtype) -> torch.Tensor | None:
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(tq, tk, generator=g) > 0.4
    keep[1] = False  # every key of row 1 hidden
    keep[-1, : tk - 1] = False  # one key left
    if kind == "bool":
        return keep
    if kind == "float":
        return torch.zeros(tq, tk, dtype=dtype).masked_fill(~keep, float("-inf"))
    return None


def _fused(exe) -> bool:
    return any("safe rowsum" in i.comment for i in exe.program.instructions)


@pytest.mark.parametrize("dtype,kind,opt", [
    (torch.float32, "bool", 0), (torch.float32, "bool", 2), (torch.float32, "float", 0),
    (torch.float32, "float", 2), (torch.float32, "none", 2), (torch.float16, "bool", 2),
    (torch.bfloat16, "float", 2)])
def test_fully_masked_rows_are_zero(dtype, kind, opt):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, t, 8, dtype=dtype) for t in (5, 7, 7))
    mask = _mask(kind, 5, 7, dtype)
    args = (q, k, v) if mask is None else (q, k, v, mask)
    exe = compiler.compile(Sdpa(), args, opt_level=opt)
    (out,) = exe.run(*args, check=True)
    want = Sdpa()(*args)
    if mask is not None:
        assert torch.all(want[:, :, 1] == 0)
        assert np.all(np.asarray(out, np.float32)[:, :, 1] == 0)
    assert_close(out, want, {torch.float32: "f32", torch.float16: "bf16", torch.bfloat16: "bf16"}[dtype])
    assert _fused(exe) == (opt == 2)  # the fusion still matches the guarded softmax


def test_runtime_bool_mask_over_several_key_chunks():
    """A pred mask that is an input (not a constant) never removes a chunk of keys: it was read as all
    False (0) when the kernel decided which 512-key chunks a mask hides, and the second chunk was lost."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 600, 16), torch.randn(1, 2, 600, 16)
    mask = torch.rand(20, 600) > 0.3
    mask[3] = False
    mask[4, :590] = False  # visible keys only in the second chunk
    exe = compiler.compile(Sdpa(), (q, k, v, mask))
    (out,) = exe.run(q, k, v, mask)
    assert _fused(exe)
    assert_close(out, Sdpa()(q, k, v, mask), "f32")


def test_finfo_min_mask_keeps_the_row_max():
    """A row whose scores are all near finfo.min (HF's padding mask) is a uniform softmax in torch; the
    kernel's running max started at -1e30, above those scores, and gave 0 / 0."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 20, 16) for _ in range(3))
    mask = torch.zeros(1, 1, 20, 20)
    mask[..., 3, :] = torch.finfo(torch.float32).min
    exe = compiler.compile(EagerSoftmax(), (q, k, v, mask))
    (out,) = exe.run(q, k, v, mask)
    assert_close(out, EagerSoftmax()(q, k, v, mask), "f32")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_causal_with_more_keys_than_queries(dtype):
    """is_causal with Tq < Tk: the fused kernel's PSUM mask fill (-1e30) is -inf in f16, and identity x mask
    would add 0 * -inf = NaN there; f16 masks in SBUF instead (OpInfo's f16 samples gave NaN everywhere)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(4, n, 8, generator=g).mul(3).to(dtype) for n in (3, 6, 6))

    class Causal(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = compiler.compile(Causal(), (q, k, v))(q, k, v).float()
    want = Causal()(q, k, v).float()
    assert not torch.isnan(out).any()
    assert_close(out, want, "f32" if dtype == torch.float32 else "bf16")
