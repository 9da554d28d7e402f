"""Every example of examples/ compiled and called as the model is called (int64 ids, masks, kwargs, the KV cache
on), against eager: at 2 layers and tiny width in CI, at 2 layers and full width in the slow suite (the full-size
figures are benchmarks/real_models.py's)."""

from __future__ import annotations

import pytest
import torch

import compiler

from .util import BOUNDS, HF_EXAMPLES, example, rel_errors


def _check(name: str, cast: str, **build) -> None:
    model, args, kwargs = example(name, **build)
    with torch.no_grad():
        want = model(*args, **kwargs)
    exe = compiler.compile(model, args, example_kwargs=kwargs, auto_cast=cast)
    got = exe(*args, **kwargs)
    assert type(got) is type(want)
    errors = rel_errors(got, want)
    assert max(errors) <= BOUNDS[cast], errors


@pytest.mark.parametrize("cast", ["none", "matmult"])
@pytest.mark.parametrize("name", HF_EXAMPLES)
def test_example_tiny(name, cast):
    _check(name, cast, layers=2 if name in ("gpt2", "bert", "llama", "t5_encoder", "vit") else 1, tiny=True)


@pytest.mark.slow
@pytest.mark.parametrize("cast", ["none", "matmult"])
@pytest.mark.parametrize("name", HF_EXAMPLES)
def test_example_full_width(name, cast):
    _check(name, cast, layers=2)
