"""Shared by the transformers examples: a model built from a config with random weights (no download), and
the environment knob `NEURONC_EXAMPLE_LAYERS` that reduces the depth (CI and benchmarks use it)."""

from __future__ import annotations

import os

import torch


def layers(default: int) -> int:
    """The depth to build: NEURONC_EXAMPLE_LAYERS when set (CI runs 2 layers), else the model's own."""
    value = os.environ.get("NEURONC_EXAMPLE_LAYERS")
    return int(value) if value else default


def token_ids(vocab: int, batch: int, seq: int) -> torch.Tensor:
    """int64 token ids as a tokenizer gives them."""
    return torch.randint(0, vocab, (batch, seq), dtype=torch.int64)


def build(model_class, config) -> torch.nn.Module:
    """The model in eval mode with seeded random weights, its attention in eager form (the form torch.export
    traces into plain ATen ops, as deployment exports do)."""
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    return model_class(config).eval()
