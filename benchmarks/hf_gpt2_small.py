"""HF GPT-2 small (12 layers, d=768, seq 128, random weights) as a `neuronc compile` model file.

Used by the compile/emulation speed measurements (docs/benchmarks.md):
    neuronc compile benchmarks/hf_gpt2_small.py -o /tmp/gpt2.neff
    neuronc run /tmp/gpt2.neff --random --checks off
"""

from __future__ import annotations

import os

import torch
from transformers import GPT2Config, GPT2Model

SEQ = int(os.environ.get("GPT2_SEQ", "128"))
LAYERS = int(os.environ.get("GPT2_LAYERS", "12"))


def get_model() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=LAYERS, use_cache=False)
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, SEQ), generator=torch.Generator().manual_seed(1))
    return model, (ids,)
