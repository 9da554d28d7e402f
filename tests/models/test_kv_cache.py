"""Decoding with a KV cache: embeddings and the cache write at a runtime position, through the indirect DMA,
against torch eager."""

from __future__ import annotations

import pytest
import torch

import compiler


class Decoder(torch.nn.Module):
    """One attention decode step as static-cache decoders write it: token + position embeddings, the new key
    and value written into the cache with index_copy at the runtime position, attention over the cache."""

    def __init__(self, vocab: int = 300, dim: int = 32, heads: int = 2, length: int = 24):
        super().__init__()
        self.emb, self.pos = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(length, dim)
        self.qkv, self.heads = torch.nn.Linear(dim, 3 * dim), heads

    def forward(self, ids, pos, k_cache, v_cache):
        x = self.emb(ids) + self.pos(pos)
        q, k, v = self.qkv(x).split(x.shape[-1], -1)
        b, t, d = q.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        k_cache, v_cache = k_cache.index_copy(2, pos, k), v_cache.index_copy(2, pos, v)
        scores = (q @ k_cache.transpose(-1, -2)) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(torch.arange(k_cache.shape[2]) > pos, float("-inf"))
        return (scores.softmax(-1) @ v_cache).transpose(1, 2).reshape(b, t, d), k_cache, v_cache


def test_decode_step_writes_the_cache_at_the_runtime_position():
    torch.manual_seed(0)
    model = Decoder().eval()
    caches = torch.randn(1, 2, 24, 16), torch.randn(1, 2, 24, 16)
    ids = torch.tensor([[17]])
    exe = compiler.compile(model, (ids, torch.tensor([3]), *caches))
    program = exe.program
    indirect = [i for i in program.instructions if i.opcode == "dma_indirect"]
    assert len(indirect) >= 4  # two embedding gathers, two cache writes
    table = next(t for t in program.tensors.values() if t.kind == "const" and t.shape == (300, 32))
    read = sum(i.operands["src"].nbytes for i in indirect if i.operands["src"].tensor == table.name)
    assert read == 32 * 4  # one row of the token table, not the table
    for pos in (0, 3, 23):
        with torch.no_grad():
            want = model(ids, torch.tensor([pos]), *caches)
        got = exe(ids, torch.tensor([pos]), *caches)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_hf_gpt2_static_cache_decode_step():
    """HF GPT-2 (tiny config) decoding one token with a StaticCache: the cache is written by index_copy_ at
    cache_position (a runtime value), the logits and both caches of every layer match eager."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    layers, length, heads, head_dim = 2, 16, 4, 16
    config = transformers.GPT2Config(n_layer=layers, n_embd=heads * head_dim, n_head=heads, vocab_size=1000)
    model = transformers.GPT2LMHeadModel(config).eval()

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, pos, *kv):
            cache = transformers.StaticCache(config=config, max_cache_len=length)
            for n, layer in enumerate(cache.layers):
                layer.keys, layer.values = kv[2 * n].clone(), kv[2 * n + 1].clone()
                layer.cumulative_length = pos.clone()
                layer.is_initialized, layer.device = True, ids.device
                layer.batch_size, layer.num_heads, layer.k_head_dim, layer.v_head_dim = 1, heads, head_dim, head_dim
            out = self.model(ids, past_key_values=cache, use_cache=True, cache_position=pos.view(1))
            return (out.logits, *[t for layer in cache.layers for t in (layer.keys, layer.values)])

    step = Step().eval()
    kv = [torch.randn(1, heads, length, head_dim) for _ in range(2 * layers)]
    ids = torch.tensor([[42]])
    exe = compiler.compile(step, (ids, torch.tensor(5), *kv))
    assert sum(i.opcode == "dma_indirect" for i in exe.program.instructions) >= 2 + 2 * layers
    for pos in (0, 5, 15):
        with torch.no_grad():
            want = step(ids, torch.tensor(pos), *kv)
        got = exe(ids, torch.tensor(pos), *kv)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
