"""What real models need of single ops: indexing with several index tensors (attention masks), gathers on
constant tables and indices, patch-embedding convolutions, matmuls whose K does not fit SBUF whole (split into
chunks accumulated in PSUM), and typed errors for what is not supported."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler
from hlo.errors import LoweringError, UnsupportedOpError


def _close(model, *args, rel=1e-5, **options):
    exe = compiler.compile(model.eval(), args, **options)
    with torch.no_grad():
        want = model(*args)
    got = exe(*args)
    want, got = (want,) if isinstance(want, torch.Tensor) else want, (got,) if isinstance(got, torch.Tensor) else got
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        err = (g.double() - w.double()).abs().max() / max(w.double().abs().max(), 1e-30)
        assert err <= rel, float(err)
    return exe


class PaddingMask(torch.nn.Module):
    """transformers' mask functions: padding_mask[batch_idx, kv_idx] with broadcast aranges."""

    def forward(self, mask, x):
        b, s = mask.shape
        batch_idx = torch.arange(b)[:, None, None, None]
        kv_idx = torch.arange(s)[None, None, None, :]
        allowed = mask.bool()[batch_idx, kv_idx]  # [b, 1, 1, s]
        return x.masked_fill(~allowed, -1e9), x[:, 1, [0, 2], [1, 3]], x[[1, 0], :, [2, 2]]


def test_indexing_with_several_index_tensors():
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1]])
    _close(PaddingMask(), mask, torch.randn(2, 3, 4, 4))


class ConstantGather(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(300, 24)
        self.register_buffer("buckets", torch.arange(40).reshape(5, 8) % 300)

    def forward(self, x):
        return self.table(self.buckets) + x, self.table(torch.arange(7)).sum(0)


def test_gather_with_constant_table_and_indices():
    _close(ConstantGather(), torch.randn(5, 8, 24))


class Patchify(torch.nn.Module):
    def __init__(self, patch: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 32, patch, stride=patch)

    def forward(self, x):
        return self.conv(x).flatten(2).transpose(1, 2)


@pytest.mark.parametrize("patch, size", [(16, 64), (14, 60), (4, 30)])  # 60 = 4 whole windows of 14 + 4 dropped
def test_patch_embedding_convolution(patch, size):
    """Windows that tile the input stay a convolution (the kernel loads one row in `patch` per folded copy)."""
    exe = _close(Patchify(patch), torch.randn(2, 3, size, size))
    assert "convolution(" in exe.hlo


def test_patch_embedding_too_wide_for_a_tile_is_one_dot():
    """When the input rows of one row of windows do not fit the convolution's tile: one dot over the patches."""
    exe = _close(Patchify(16), torch.randn(1, 3, 16, 1600))  # 16 rows x 1600 fp32 columns = 100 KiB per channel
    assert "convolution(" not in exe.hlo


def test_matmul_whose_k_does_not_fit_sbuf_accumulates_chunks_in_psum():
    layer = torch.nn.Linear(16384, 256, bias=True)
    exe = _close(layer, torch.randn(128, 16384), rel=1e-5)
    assert " c1 k0" in exe.asm  # the second K chunk adds into the same accumulators


def test_linalg_inv_is_reported_as_an_unsupported_op():
    class Inv(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.inv(x)

    with pytest.raises(UnsupportedOpError, match=r"aten.linalg_inv_ex.default \(node %linalg_inv_ex at .*:\d+\)"):
        compiler.compile(Inv(), (torch.randn(3, 3),))


def test_repeat_of_a_zero_d_tensor():
    class Repeat(torch.nn.Module):
        def forward(self, x, s):
            return s.repeat(3) * x, s.repeat(2, 2)

    _close(Repeat(), torch.randn(3), torch.tensor(1.5))


def test_narrow_with_a_tensor_start_says_what_to_do():
    class Narrow(torch.nn.Module):
        def forward(self, x, start):
            return x.narrow(1, start, 2)

    with pytest.raises(LoweringError, match="pass such a value as a Python int"):
        compiler.compile(Narrow(), (torch.randn(3, 6), torch.tensor(2)))


def test_run_returns_numpy_in_torch_dtypes_for_hlo_files(tmp_path):
    class Pred(torch.nn.Module):
        def forward(self, ids):
            return ids > 2, ids * 2

    exe = compiler.compile(Pred(), (torch.tensor([1, 5, 3]),))
    path = tmp_path / "p.neff"
    exe.save(path)
    loaded = compiler.load(path)
    keep, twice = loaded.run(np.array([1, 5, 3]))
    assert keep.dtype == np.bool_ and twice.dtype == np.int64
    assert keep.tolist() == [False, True, True] and twice.tolist() == [2, 10, 6]
