"""The encoder of T5-base (`t5-base`'s configuration: d 768, 12 heads, MLP 3072, 12 layers, relative position
buckets) with random weights: int64 ids and an attention mask with padding.

    neuronc compile examples/t5_encoder.py -o t5.neff
"""

import torch
from _hf import build, depth, token_ids
from transformers import T5Config, T5EncoderModel


def get_model(layers: int | None = None, tiny: bool = False):
    size = dict(d_model=64, d_kv=16, num_heads=4, d_ff=256, vocab_size=1000) if tiny else {}
    config = T5Config(num_layers=depth(12, layers), **size)  # defaults are t5-base's sizes, vocab 32128
    model = build(T5EncoderModel, config)
    batch, seq = 1, 32 if tiny else 128
    ids = token_ids(config.vocab_size, batch, seq)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[:, -seq // 8:] = 0
    return model, (ids,), {"attention_mask": mask}
