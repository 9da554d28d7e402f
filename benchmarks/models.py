"""The models of the benchmark suite (benchmarks/run.py): GEMMs, an MLP, a ResNet conv block and
GPT-2-small-size transformer blocks (d=768, 12 heads, MLP 3072; nanoGPT's formulation)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from tests.frontend.zoo import MLP, CausalSelfAttention  # the zoo's models, at benchmark sizes

GPT2_SMALL = {"d": 768, "heads": 12, "mlp": 3072, "layers": 12}


@dataclass(frozen=True)
class Case:
    """One benchmark model: `build()` returns (module in eval mode, example inputs)."""

    name: str
    description: str
    build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    auto_cast: str = "matmult"  # bf16 matmuls (fp32 accumulation), everything else fp32


class Linear(nn.Module):
    """A bias-free Linear: a plain GEMM."""

    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class BasicBlock(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN + identity, ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)


class Block(nn.Module):
    """GPT-2 transformer block (pre-norm): x + attn(ln1(x)), then + mlp(ln2(x)) with tanh GELU."""

    def __init__(self, d: int, heads: int, hidden: int, seq: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, hidden)
        self.out = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2Stack(nn.Module):
    """`layers` GPT-2 blocks and the final layer norm, on hidden states (no token embedding or LM head)."""

    def __init__(self, layers: int, seq: int, d: int = 768, heads: int = 12, hidden: int = 3072):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads, hidden, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


def _seeded(factory: Callable[[], nn.Module], *shape: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = factory().eval()
    for module in model.modules():  # non-trivial batch-norm statistics
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(*shape),)


def gemm(n: int) -> Case:
    return Case(f"gemm{n}", f"{n}x{n}x{n} GEMM (Linear without bias), bf16",
                lambda: _seeded(lambda: Linear(n), n, n))


def block(seq: int) -> Case:
    g = GPT2_SMALL
    return Case(f"gpt2_block_s{seq}", f"GPT-2-small block (d={g['d']}, {g['heads']} heads, MLP {g['mlp']}), "
                f"batch 1, seq {seq}",
                lambda: _seeded(lambda: Block(g["d"], g["heads"], g["mlp"], seq), 1, seq, g["d"]))


def stack(layers: int, seq: int) -> Case:
    return Case(f"gpt2_{layers}L_s{seq}", f"GPT-2-small stack: {layers} blocks + final LN, batch 1, seq {seq}",
                lambda: _seeded(lambda: GPT2Stack(layers, seq), 1, seq, GPT2_SMALL["d"]))


SUITE: list[Case] = [
    gemm(2048),
    gemm(4096),
    Case("mlp", "MLP 1024-4096-4096-1024 with GELU, batch 512", lambda: _seeded(
        lambda: MLP((1024, 4096, 4096, 1024)), 512, 1024)),
    Case("conv_block", "ResNet basic block, 64 channels, 56x56, batch 1", lambda: _seeded(
        lambda: BasicBlock(64), 1, 64, 56, 56)),
    block(128),
    block(512),
    stack(12, 128),
]


def by_name(names: list[str] | None) -> list[Case]:
    """The suite's cases named (all when `names` is empty); raises KeyError naming an unknown one."""
    if not names:
        return list(SUITE)
    known = {c.name: c for c in SUITE}
    missing = [n for n in names if n not in known]
    if missing:
        raise KeyError(f"unknown model(s) {', '.join(missing)}; known: {', '.join(known)}")
    return [known[n] for n in names]
