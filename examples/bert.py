"""BERT-base (110M, `bert-base-uncased`'s configuration) with random weights, as a tokenizer feeds it: int64 input
ids, token type ids and an attention mask (the last 16 positions padding).

    neuronc compile examples/bert.py -o bert.neff
"""

import torch
from _hf import build, depth, token_ids
from transformers import BertConfig, BertModel


def get_model(layers: int | None = None, tiny: bool = False):
    size = dict(hidden_size=64, num_attention_heads=4, intermediate_size=256, vocab_size=1000) if tiny else {}
    config = BertConfig(num_hidden_layers=depth(12, layers), **size)  # defaults: 768, 12 heads, 3072, 30522
    model = build(BertModel, config)
    batch, seq = 1, 32 if tiny else 128
    ids = token_ids(config.vocab_size, batch, seq)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[:, -seq // 8:] = 0
    return model, (ids,), {"attention_mask": mask, "token_type_ids": torch.zeros(batch, seq, dtype=torch.int64)}
