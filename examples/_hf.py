"""Shared by the transformers examples: a model built from a config with random weights (no download).

Every example's ``get_model(layers=None, tiny=False)`` builds the full default size; ``layers`` reduces the depth
(the environment variable NEURONC_EXAMPLE_LAYERS does the same for `neuronc compile`), ``tiny`` the width (hidden
64, as the CI tests run them next to the slow full-width ones).
"""

from __future__ import annotations

import os

import torch


def depth(default: int, layers: int | None) -> int:
    """The depth to build: `layers`, else NEURONC_EXAMPLE_LAYERS when set, else the model's own."""
    if layers is None:
        value = os.environ.get("NEURONC_EXAMPLE_LAYERS")
        layers = int(value) if value else default
    return min(default, layers)


def token_ids(vocab: int, batch: int, seq: int) -> torch.Tensor:
    """int64 token ids as a tokenizer gives them."""
    return torch.randint(0, vocab, (batch, seq), dtype=torch.int64)


def build(model_class, config) -> torch.nn.Module:
    """The model in eval mode with seeded random weights, its attention in eager form (the form torch.export
    traces into plain ATen ops, as deployment exports do)."""
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = model_class(config).eval()
    for m in model.modules():  # running statistics as a trained network has them (fresh: mean 0, var 1)
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model
