"""BERT-base (110M, `bert-base-uncased`'s configuration) with random weights, as a tokenizer feeds it: int64
input ids, token type ids and attention mask (the last 16 positions padding).

    neuronc compile examples/bert.py -o bert.neff
"""

import torch
from _hf import build, layers, token_ids
from transformers import BertConfig, BertModel

BATCH, SEQ = 1, 128


def get_model():
    config = BertConfig(num_hidden_layers=layers(12))  # defaults: hidden 768, 12 heads, MLP 3072, vocab 30522
    model = build(BertModel, config)
    ids = token_ids(config.vocab_size, BATCH, SEQ)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[:, -16:] = 0
    token_type = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    return model, (ids,), {"attention_mask": mask, "token_type_ids": token_type}
