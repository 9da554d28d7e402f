"""A compiled model is a drop-in callable: the model's arguments (int64, bool, 0-d, dicts, cache objects)
in, its output structure out as torch tensors of torch's dtypes; exe.run gives numpy in the same dtypes; decoding
steps with a KV cache and greedy generate() through torch.compile."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import compiler
from isa.errors import InputError

from .util import example, rel_errors


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)

    def forward(self, ids, mask, pixels, scale, extra=None):
        h = self.emb(ids) * mask[..., None] * scale
        return {"h": h, "keep": mask & (ids > 3), "next": ids + 1, "mean": pixels.float().mean() + extra["bias"]}


def _mixed_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (2, 6), generator=g)
    mask = torch.rand(2, 6, generator=g) > 0.3
    pixels = torch.randn(3, 4, generator=g, dtype=torch.float64).float()
    return (ids, mask, pixels, torch.tensor(1.5)), {"extra": {"bias": torch.tensor(0.25)}}


def test_drop_in_call_takes_and_returns_what_torch_does():
    model = Mixed().eval()
    args, kwargs = _mixed_inputs(0)
    exe = compiler.compile(model, args, example_kwargs=kwargs)
    args, kwargs = _mixed_inputs(1)
    with torch.no_grad():
        want = model(*args, **kwargs)
    got = exe(*args, **kwargs)
    assert isinstance(got, dict) and list(got) == list(want)
    assert {k: v.dtype for k, v in got.items()} == {k: v.dtype for k, v in want.items()}
    assert max(rel_errors(got, want)) <= 1e-6
    assert torch.equal(got["keep"], want["keep"]) and torch.equal(got["next"], want["next"])
    flat = exe.run(*args, **kwargs)  # numpy, same dtypes, flat
    assert [a.dtype for a in flat] == [np.float32, np.bool_, np.int64, np.float32]
    # keyword arguments in another order, numpy arrays for tensors
    got2 = exe(args[0].numpy(), args[1].numpy(), args[2].numpy(), np.float32(1.5), extra={"bias": np.float32(0.25)})
    assert torch.equal(got2["next"], want["next"])


def test_int64_beyond_32_bits_is_exact_and_a_missing_argument_is_a_typed_error():
    model = Mixed().eval()
    args, kwargs = _mixed_inputs(0)
    exe = compiler.compile(model, args, example_kwargs=kwargs)
    ids = args[0].clone()
    ids[0, 0] = 2**40  # the device keeps s64 in 64-bit integers: no range to check (docs/integer-semantics.md)
    with pytest.raises(InputError, match="missing extra"):
        exe(*args)
    flat = exe.run(ids, *args[1:], **kwargs)
    assert flat[2][0, 0] == 2**40 + 1 and flat[2].dtype == np.int64


def test_kv_cache_decoding_step_matches_eager():
    model, args, kwargs = example("gpt2", layers=2, tiny=True)
    ids = args[0][:, :12]
    with torch.no_grad():
        prefill = model(ids)
    step = prefill.logits[:, -1:].argmax(-1)
    with torch.no_grad():
        want = model(step, cache=copy.deepcopy(prefill.cache))
    exe = compiler.compile(model, (step,), example_kwargs={"cache": copy.deepcopy(prefill.cache)})
    got = exe(step, cache=copy.deepcopy(prefill.cache))
    assert type(got.cache) is type(want.cache)
    assert [tuple(layer.keys.shape) for layer in got.cache.layers] == [(1, 4, 13, 16)] * 2
    assert max(rel_errors(got, want)) <= 1e-4


def test_greedy_generate_through_torch_compile():
    from compiler.dynamo import compile_stats

    model, args, _ = example("gpt2", layers=2, tiny=True)
    ids = args[0][:, :8]
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    torch._dynamo.reset()
    compile_stats(reset=True)
    forward = model.forward
    model.forward = torch.compile(forward, backend="neuronc")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", category=compiler.dynamo.NeuroncFallbackWarning)
            got = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    finally:
        model.forward = forward
        torch._dynamo.reset()
    assert torch.equal(got, want)
    stats = compile_stats()
    # the prompt and each decoding step have new shapes (the cache grows): one program per call, none eager
    assert stats["eager"] == 0 and stats["compiles"] == 3


class _Bytes(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return x.float() * 2 + y, x + 3  # the second wraps at 256, as torch's uint8 does


def test_uint8_inputs_and_outputs_keep_torch_semantics():
    x = torch.arange(224, 256, dtype=torch.uint8).reshape(4, 8)  # 253..255 + 3 wrap around
    y = torch.randn(4, 8)
    exe = compiler.compile(_Bytes(), (x, y))
    got = exe(x, y)
    want = _Bytes()(x, y)
    assert got[1].dtype == torch.uint8 and torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0])
