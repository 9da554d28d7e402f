"""A Llama-architecture causal LM at Llama-3.2-1B width (hidden 2048, MLP 8192, 32 heads / 8 KV heads,
vocab 128256, tied embeddings) with 2 layers and random weights, called as `generate()` calls it on a
prompt (int64 ids, attention mask, KV cache on).

    neuronc compile examples/llama.py -o llama.neff
"""

import torch
from _hf import build, layers, token_ids
from transformers import LlamaConfig, LlamaForCausalLM

BATCH, SEQ = 1, 128


def get_model():
    config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, num_hidden_layers=layers(2),
                         max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
                         rms_norm_eps=1e-5)
    model = build(LlamaForCausalLM, config)
    ids = token_ids(config.vocab_size, BATCH, SEQ)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    return model, (ids,), {"attention_mask": mask}
