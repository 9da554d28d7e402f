"""GPT-2 (124M, the `gpt2` checkpoint's configuration) with random weights: a causal LM as `generate()` calls it on a
prompt: int64 token ids and an attention mask, the KV cache on (use_cache defaults to True: the outputs are the
logits and the DynamicCache).

    neuronc compile examples/gpt2.py -o gpt2.neff
"""

import torch
from _hf import build, depth, token_ids
from transformers import GPT2Config, GPT2LMHeadModel


def get_model(layers: int | None = None, tiny: bool = False):
    size = dict(n_embd=64, n_head=4, vocab_size=1000) if tiny else {}  # defaults: d 768, 12 heads, vocab 50257
    config = GPT2Config(n_layer=depth(12, layers), **size)
    model = build(GPT2LMHeadModel, config)
    batch, seq = 1, 32 if tiny else 128
    ids = token_ids(config.vocab_size, batch, seq)
    return model, (ids,), {"attention_mask": torch.ones(batch, seq, dtype=torch.int64)}
