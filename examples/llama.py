"""A Llama-architecture causal LM at Llama-3.2-1B width (hidden 2048, MLP 8192, 32 heads / 8 KV heads, vocab
128256, tied embeddings) with 2 layers and random weights, called as `generate()` calls it on a prompt (int64 ids,
an attention mask, the KV cache on).

    neuronc compile examples/llama.py -o llama.neff
"""

import torch
from _hf import build, depth, token_ids
from transformers import LlamaConfig, LlamaForCausalLM


def get_model(layers: int | None = None, tiny: bool = False):
    size = (dict(hidden_size=64, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 vocab_size=1000) if tiny else
            dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=64, vocab_size=128256))
    config = LlamaConfig(num_hidden_layers=depth(2, layers), max_position_embeddings=131072, rope_theta=500000.0,
                         tie_word_embeddings=True, rms_norm_eps=1e-5, **size)
    model = build(LlamaForCausalLM, config)
    batch, seq = 1, 32 if tiny else 128
    ids = token_ids(config.vocab_size, batch, seq)
    return model, (ids,), {"attention_mask": torch.ones(batch, seq, dtype=torch.int64)}
