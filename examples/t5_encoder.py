"""The encoder of T5-base (`t5-base`'s configuration: d 768, 12 heads, MLP 3072, 12 layers, relative position
buckets) with random weights: int64 ids and an attention mask with padding.

    neuronc compile examples/t5_encoder.py -o t5.neff
"""

import torch
from _hf import build, layers, token_ids
from transformers import T5Config, T5EncoderModel

BATCH, SEQ = 1, 128


def get_model():
    config = T5Config(num_layers=layers(12))  # defaults are t5-base's sizes, vocab 32128
    model = build(T5EncoderModel, config)
    ids = token_ids(config.vocab_size, BATCH, SEQ)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[:, -16:] = 0
    return model, (ids,), {"attention_mask": mask}
