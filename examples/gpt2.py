"""GPT-2 (124M, the `gpt2` checkpoint's configuration) with random weights: a causal LM as `generate()` calls
it on a prompt: int64 token ids and an attention mask, the KV cache on (use_cache defaults to True).

    neuronc compile examples/gpt2.py -o gpt2.neff
"""

import torch
from _hf import build, layers, token_ids
from transformers import GPT2Config, GPT2LMHeadModel

BATCH, SEQ = 1, 128


def get_model():
    config = GPT2Config(n_layer=layers(12))  # the defaults are GPT-2 small: d 768, 12 heads, vocab 50257
    model = build(GPT2LMHeadModel, config)
    ids = token_ids(config.vocab_size, BATCH, SEQ)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    return model, (ids,), {"attention_mask": mask}
