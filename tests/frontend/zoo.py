"""The model zoo: ordinary inference models the frontend must take in through every capture path.

``ZOO`` maps a name to a factory returning (model in eval mode, example inputs). ``EMULATED`` names the
models whose graphs the backend compiles today (their torch.compile graphs must run on the emulator,
not fall back to eager): all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (32, 64, 64, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return x


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv + batch norm, a projection shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class DepthwiseSeparable(nn.Module):
    """MobileNet's block: depthwise 3x3 conv, pointwise 1x1 conv, batch norm, hardswish, avg pooling."""

    def __init__(self, cin: int = 8, cout: int = 16):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, 2, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self.bn1(self.dw(x)))
        y = F.hardswish(self.bn2(self.pw(y)))
        return F.avg_pool2d(y, 2)


class GPTBlock(nn.Module):
    """A GPT-2-style decoder block in plain torch: causal mask buffer, masked_fill, softmax, tanh gelu."""

    def __init__(self, d: int = 32, heads: int = 4, block: int = 16):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention: one QKV projection, heads split by view + transpose, a causal mask."""

    def __init__(self, d: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class LSTMClassifier(nn.Module):
    """Token embeddings, a 2-layer LSTM, a linear head on the last hidden state."""

    def __init__(self, vocab: int = 40, d: int = 16, hidden: int = 24, classes: int = 5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(self.emb(ids))
        return self.head(h[-1])


def _with_statistics(model: nn.Module) -> nn.Module:
    """Random batch-norm statistics and affine parameters (fresh ones would make batch norm the identity)."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.2)
    return model.eval()


def _hf_gpt2() -> tuple[nn.Module, tuple]:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    return GPT2Model(config).eval(), (torch.randint(0, 128, (2, 10)),)


def _hf_bert() -> tuple[nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                        vocab_size=128, max_position_embeddings=32)
    return BertModel(config).eval(), (torch.randint(0, 128, (3, 9)),)


ZOO: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "mlp": lambda: (MLP().eval(), (torch.randn(8, 32),)),
    "resnet": lambda: (_with_statistics(ResNet()), (torch.randn(2, 3, 16, 16),)),
    "depthwise_separable": lambda: (_with_statistics(DepthwiseSeparable()), (torch.randn(2, 8, 12, 12),)),
    "transformer_encoder_layer": lambda: (nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval(),
                                          (torch.randn(2, 7, 32),)),
    "gpt_block": lambda: (GPTBlock().eval(), (torch.randn(2, 12, 32),)),
    "lstm_classifier": lambda: (LSTMClassifier().eval(), (torch.randint(0, 40, (3, 6)),)),
    "hf_gpt2": _hf_gpt2,
    "hf_bert": _hf_bert,
}

EMULATED = tuple(ZOO)  # every graph of every zoo model

# torch.compile options per model (none needed: hf_bert's -O2 wrong numbers at 9986090 are fixed since).
COMPILE_OPTIONS: dict[str, dict] = {}
