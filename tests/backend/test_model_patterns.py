"""Patterns as real model code writes them compile to streaming kernels with large DMAs, and match eager torch."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import compiler
from isa.emulator.timing import contiguous_runs
from tests.conftest import assert_close


def small_runs(exe: compiler.driver.Executable, below: int = 512) -> list[str]:
    """Comments of the DMAs whose contiguous runs are shorter than `below` bytes on average."""
    found = []
    for inst in exe.program.instructions:
        if inst.opcode != "dma":
            continue
        dst, src = inst.operands["dst"], inst.operands["src"]
        runs = max(contiguous_runs(src), contiguous_runs(dst))
        if src.nbytes / runs < below:
            found.append(inst.comment)
    return found


class WrittenOutGeluMLP(nn.Module):
    """HF GPT-2's MLP: Conv1D (x @ W + b) and tanh-GELU written out as 0.5*x*(1+tanh(...))."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(d, hidden) / math.sqrt(d))
        self.b1 = nn.Parameter(torch.randn(hidden) * 0.1)
        self.w2 = nn.Parameter(torch.randn(hidden, d) / math.sqrt(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.addmm(self.b1, x.view(-1, x.shape[-1]), self.w1)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + (h @ self.w2).view(x.shape)


@pytest.mark.parametrize("auto_cast", ["none", "matmult"])
def test_written_out_gelu_is_a_matmul_epilogue(auto_cast):
    torch.manual_seed(0)
    model = WrittenOutGeluMLP(256, 512).eval()
    x = torch.randn(1, 128, 256)
    exe = compiler.compile(model, (x,), auto_cast=auto_cast)
    assert "kind=kLoop" not in exe.hlo  # the GELU is the first matmul's epilogue, no kernel of its own
    assert not small_runs(exe)
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "f32" if auto_cast == "none" else "bf16")
