"""Every model of the frontend's zoo compiled (compiler.compile, export capture) and emulated against eager
torch, in fp32 and with bf16 auto-cast; the GPT-style block also with each fusion strategy."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_leaves

import compiler
from tests.conftest import TOLERANCES
from tests.frontend.zoo import ZOO


@functools.cache
def _model(name: str):
    torch.manual_seed(0)
    model, inputs = ZOO[name]()
    with torch.no_grad():
        expected = [t.detach().float().numpy() for t in tree_leaves(model(*inputs))]
    return model, inputs, expected


def _run(name: str, cast: str, fusion: str = "greedy") -> None:
    model, inputs, expected = _model(name)
    exe = compiler.compile(model, inputs, auto_cast=cast, fusion=fusion)
    # s64 values (token ids) are int32 on the device; exe.run takes the program's own types
    outputs = exe.run(*(t.to(torch.int32) if t.dtype == torch.int64 else t for t in inputs), check=True)
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(np.asarray(out, np.float32), ref, **TOLERANCES["f32" if cast == "none" else "bf16"])


@pytest.mark.parametrize("cast", ["none", "matmult"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_model(name: str, cast: str):
    _run(name, cast)


@pytest.mark.parametrize("fusion", ["none", "cost"])
def test_gpt_block_fusion_strategies(fusion: str):
    _run("gpt_block", "none", fusion)
