"""A small pre-norm transformer block (GPT style): layer norm, causal multi-head attention, layer norm, MLP."""

import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int = 256, heads: int = 4, hidden: int = 1024):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, hidden)
        self.out = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def get_model():
    """Return the model and example inputs, as `neuronc compile` expects."""
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(1, 128, 256),)
