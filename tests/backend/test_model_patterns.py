"""Patterns as real model code writes them compile to streaming kernels with large DMAs, and match eager torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import compiler
from backend.options import BackendOptions
from isa.emulator.timing import contiguous_runs
from tests.backend.util import BF16, TOL, bf16_round, body_module, dot_text, layer_computation, rand, run_hlo
from tests.conftest import assert_close
from tests.frontend.zoo import CausalSelfAttention


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


def constant_layer_text(m: int, k: int, n: int, dtype: str) -> str:
    """relu(x @ w^T + b) with constant w and b; its result feeds a dot contracting its minor axis, so it
    is written feature-major (the bias is per partition) and w is the stationary operand."""
    comp = layer_computation("layer", m, k, n, "relu", dtype)
    return (f"HloModule layer\n\n{comp}\nENTRY %main (x: {dtype}[{m},{k}], eye: f32[{n},{n}]) -> f32[{m},{n}] {{\n"
            f"  %x = {dtype}[{m},{k}] parameter(0)\n  %eye = f32[{n},{n}] parameter(1)\n"
            f'  %w = {dtype}[{n},{k}] constant({{...}}), data="w"\n  %b = f32[{n}] constant({{...}}), data="b"\n'
            f"  %h = f32[{m},{n}] fusion(%x, %w, %b), kind=kOutput, calls=%layer\n"
            f"  ROOT %out = f32[{m},{n}] dot(%h, %eye), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_constant_weights_load_in_one_run_per_block(dtype):
    """Constant matmul operands are stored tiled as their kernel reads them: every weight DMA reads one
    contiguous HBM run (a K of 300 is two full K-tiles and a partial one; 700 columns end in a ragged
    block), and the per-partition bias of a feature-major result is read once, in one DMA."""
    m, k, n = 96, 300, 700
    np_dtype = BF16 if dtype == "bf16" else np.float32
    x, w, b = rand(m, k, seed=1, dtype=np_dtype), (rand(n, k, seed=2) / 10).astype(np_dtype), rand(n, seed=3)
    eye = np.eye(n, dtype=np.float32)
    (out,), result = run_hlo(constant_layer_text(m, k, n, dtype), [x, eye], constants={"w": w, "b": b})
    h = np.maximum(x.astype(np.float32) @ w.astype(np.float32).T + b, 0)
    np.testing.assert_allclose(out, h, **TOL[dtype])
    consts = {name for name, t in result.program.tensors.items() if t.kind == "const"}
    reads = [i for i in result.program.instructions if i.opcode == "dma" and i.comment.startswith("k1.")
             and i.operands["src"].tensor in consts]
    assert reads and all(contiguous_runs(i.operands["src"]) == 1 for i in reads)
    bias = [i for i in reads if i.operands["src"].dtype == "f32" and i.operands["src"].nbytes <= 4 * 128 * -(-n // 128)
            and "stat" not in i.comment and "mov" not in i.comment]
    assert len(bias) == 1


@pytest.mark.parametrize("group_bytes,runs", [(12 * 1024, {1400}), (2048, {512, 376})])
def test_constant_stationary_blocks_load_in_groups(group_bytes, runs):
    """Short stationary blocks (K = 256: 1 KiB per partition in f32) are stored and loaded several at a time:
    each DMA reads one run per partition of a whole group of blocks (the last group narrower), and the
    result is the same."""
    m, k, n = 96, 256, 700
    x, w, b = rand(m, k, seed=1), rand(n, k, seed=2) / 10, rand(n, seed=3)
    eye = np.eye(n, dtype=np.float32)
    options = BackendOptions(const_group_bytes=group_bytes)
    (out,), result = run_hlo(constant_layer_text(m, k, n, "f32"), [x, eye], constants={"w": w, "b": b},
                             options=options)
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), **TOL["f32"])
    reads = [i.operands["src"] for i in result.program.instructions
             if i.opcode == "dma" and i.comment.startswith("k1.") and " stat " in i.comment]
    assert {s.pattern[0][1] for s in reads} == runs
    assert all(contiguous_runs(s) == 1 for s in reads)
    assert sum(s.nbytes for s in reads) == k * n * 4


def const_dot_text(m: int, k: int, n: int) -> str:
    """ROOT = x @ w with w a constant stored [N, K] (nn.Linear's weight)."""
    return (f"HloModule dot\nENTRY %main (x: f32[{m},{k}]) -> f32[{m},{n}] {{\n  %x = f32[{m},{k}] parameter(0)\n"
            f'  %w = f32[{n},{k}] constant({{...}}), data="w"\n'
            f"  ROOT %dot = f32[{m},{n}] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}\n}}\n")


def test_single_row_takes_the_constant_weight_as_stationary():
    """A classifier on one pooled row: the constant weight is the stationary operand (PE works through its
    blocks as they arrive), the row the moving one; same result."""
    k, n = 256, 700
    x, w = rand(1, k, seed=1), rand(n, k, seed=2) / 10
    (out,), result = run_hlo(const_dot_text(1, k, n), [x], constants={"w": w})
    np.testing.assert_allclose(out, x @ w.T, **TOL["f32"])
    consts = {name for name, t in result.program.tensors.items() if t.kind == "const"}
    stat = [i for i in result.program.instructions if i.opcode == "dma" and " stat " in i.comment]
    assert stat and all(i.operands["src"].tensor in consts for i in stat)


def test_results_stored_a_group_of_tiles_at_a_time():
    """A row-major result going to HBM is staged a whole group of moving tiles wide and stored in one DMA:
    runs of more than one 512-column tile per partition (the last group, tile by tile, excepted)."""
    m, k, n = 128, 256, 3000
    x, w = rand(m, k, seed=1), rand(n, k, seed=2) / 10
    (out,), result = run_hlo(const_dot_text(m, k, n), [x], constants={"w": w})
    np.testing.assert_allclose(out, x @ w.T, **TOL["f32"])
    stores = [i.operands["dst"] for i in result.program.instructions if i.opcode == "dma" and "store" in i.comment]
    assert max(s.pattern[-1][1] for s in stores) > 512
    assert sum(s.nbytes for s in stores) == m * n * 4


def test_streamed_results_staged_over_groups():
    """An LM head: the constant weight streams block by block as the moving operand; its results, rows of one
    group of moving tiles at a time, are staged over consecutive groups and stored 8 KiB per partition at a
    time (4 tiles of 512 f32 columns; the last group, tile by tile, excepted)."""
    m, k, n = 128, 256, 5000
    x, w = rand(m, k, seed=1), rand(n, k, seed=2) / 10
    options = BackendOptions(moving_resident_bytes=1024)
    (out,), result = run_hlo(const_dot_text(m, k, n), [x], constants={"w": w}, options=options)
    np.testing.assert_allclose(out, x @ w.T, **TOL["f32"])
    stores = [i.operands["dst"] for i in result.program.instructions if i.opcode == "dma" and "store" in i.comment]
    assert max(s.pattern[-1][1] for s in stores) == 4 * 512
    assert sum(s.nbytes for s in stores) == m * n * 4


@pytest.mark.parametrize("rhs_transposed", [False, True])
def test_streamed_moving_operand_block_by_block(rhs_transposed):
    """A moving operand too large to stay in SBUF is streamed once per super-block of R stationary blocks,
    accumulated block by block (R beyond the PSUM banks): 1100 rows are 9 blocks, two super-blocks of up
    to 8, the second refilled block by block during the first's last group."""
    m, k, n = 1100, 260, 1300
    x, w = rand(m, k, seed=4), rand(*((n, k) if rhs_transposed else (k, n)), seed=5)
    options = BackendOptions(moving_resident_bytes=1024)
    (out,), result = run_hlo(dot_text(m, k, n, rhs_transposed=rhs_transposed), [x, w], options=options)
    np.testing.assert_allclose(out, x @ (w.T if rhs_transposed else w), **TOL["f32"])
    moving = sum(i.operands["src"].nbytes for i in result.program.instructions
                 if i.opcode == "dma" and " mov " in i.comment)
    assert moving <= 2 * k * n * 4  # streamed twice (two super-blocks), not once per pair of blocks


@pytest.mark.parametrize("auto_cast,heads", [("none", 4), ("matmult", 4), ("matmult", 8)])
def test_attention_heads_loaded_once_mask_in_psum(auto_cast, heads):
    """The heads of Q, K and V sit side by side in the QKV projection's output: the attention kernel
    loads all of them at once in rows of every head (no 128-byte runs), and the causal mask of the
    diagonal blocks is added in PSUM by a matmul (no POOL select over the scores)."""
    torch.manual_seed(0)
    model = CausalSelfAttention(256, heads, 256).eval()
    x = torch.randn(1, 256, 256)
    exe = compiler.compile(model, (x,), auto_cast=auto_cast)
    assert not small_runs(exe)
    insts = exe.program.instructions
    assert any("causal mask" in i.comment and i.opcode == "multiply_moving" for i in insts)
    assert not any("causal mask" in i.comment and i.opcode == "affine_select" for i in insts)
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "f32" if auto_cast == "none" else "bf16")


def test_narrowing_convert_is_written_by_its_producer():
    """convert(bf16) of an fp32 value only it uses costs no pass: the instruction computing the value writes
    bf16 itself (engines compute in fp32 and round on the write, as the convert would)."""
    params = [("x", "f32[256,384]"), ("y", "f32[256,384]")]
    body = """
  %m = f32[256,384] multiply(%x, %y)
  %a = f32[256,384] add(%m, %x)
  %t = f32[256,384] tanh(%a)
  %c = bf16[256,384] convert(%t)
"""
    x, y = rand(256, 384, seed=1), rand(256, 384, seed=2)
    (out,), result = run_hlo(body_module(params, body, "bf16[256,384]", fused="kLoop"), [x, y])
    assert out.dtype == BF16
    np.testing.assert_allclose(out.astype(np.float32), bf16_round(np.tanh(x * y + x)), rtol=8e-3, atol=8e-3)
    insts = [i for i in result.program.instructions if i.engine in ("act", "dve", "pool")]
    assert not any(i.comment.endswith(" convert") for i in insts)
    assert any(i.operands["dst"].dtype == "bf16" and i.opcode == "activation" for i in insts)  # tanh writes bf16


def test_weight_dmas_keep_whole_runs_per_partition():
    """Large weight loads are split across the queues by partitions, never inside a partition's run (a
    moving block of K = 768 is 6 KiB per partition: cut into 2 KiB pieces it paid the descriptor overhead
    three times)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(768, 2048), nn.GELU(), nn.Linear(2048, 768)).eval()
    x = torch.randn(1, 128, 768)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    consts = {name for name, t in exe.program.tensors.items() if t.kind == "const"}
    reads = [i for i in exe.program.instructions if i.opcode == "dma" and i.operands["src"].tensor in consts
             and i.operands["src"].nbytes >= 64 * 1024 // 4]
    assert reads
    for inst in reads:  # fc1's stationary blocks: 1536 B per partition; fc2's moving ones: 16 KiB
        dst = inst.operands["dst"]
        per_partition = dst.free_size * dst.itemsize
        assert contiguous_runs(dst) == dst.partitions, inst.comment
        assert per_partition >= (8192 if " mov " in f" {inst.comment} " else 1536), inst.comment
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "bf16")


def test_patch_embedding_casts_whole_rows():
    """A ViT patch embedding (16x16 convolution, stride 16) under auto-cast: the image's rows are cast to bf16
    whole, in one instruction over every (channel, kernel row) partition, not tile by tile on [16 x 16] tiles
    (one DMA latency each, as the im2col lowering did)."""
    torch.manual_seed(0)
    model = nn.Conv2d(3, 192, 16, 16).eval()
    x = torch.randn(1, 3, 64, 64)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    casts = [i for i in exe.program.instructions if i.engine in ("act", "dve", "pool") and " cast " in
             f" {i.comment} " and i.operands["dst"].dtype == "bf16"]
    assert len(casts) == 1 and casts[0].operands["dst"].partitions == 3 * 16, [i.comment for i in casts]
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "bf16")


def test_transposing_loads_read_resident_rows_in_place():
    """A layer norm's output kept on chip (rows on partitions) feeds a matmul that needs it K-major: PE
    transposes its SBUF image in place; no on-chip DMA copies the rows first (such a copy holds a DMA
    queue as long as an HBM load of the same bytes)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(384), nn.Linear(384, 512), nn.ReLU(), nn.Linear(512, 384)).eval()
    x = torch.randn(1, 256, 384)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    insts = exe.program.instructions
    assert any(i.opcode in ("transpose", "multiply_moving") and "transpose" in i.comment for i in insts)
    on_chip_rows = [i.comment for i in insts if i.opcode == "dma" and "load rows" in i.comment
                    and "hbm" not in (i.operands["src"].memory, i.operands["dst"].memory)]
    assert not on_chip_rows
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "bf16")


class SwiGLU(nn.Module):
    """Llama's MLP as HF writes it: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def test_swiglu_inputs_stored_as_its_product():
    """silu(gate) * up is the up projection's epilogue (no kernel of its own), stored K-major for the down
    projection; silu(gate) is stored in the same order, so the epilogue reads whole rows instead of 4-byte
    transposing runs."""
    torch.manual_seed(0)
    model = SwiGLU(256, 1024).eval()
    x = torch.randn(1, 128, 256)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    assert "kind=kLoop" not in exe.hlo
    assert not small_runs(exe)
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "bf16")


class RMSNorm(nn.Module):
    """HF's LlamaRMSNorm: the statistic keeps its dim (mean(-1, keepdim=True))."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d) * 0.1 + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-5))


def test_rmsnorm_with_keepdim_is_one_row_kernel():
    """The keepdim reshape after the mean sinks to the statistic's broadcast back, so RMSNorm (statistic,
    rsqrt, normalize, weight) is one row kernel; it was three, the last reading the input with 4-byte
    transposing runs to write it K-major for the matmul after it."""
    torch.manual_seed(0)
    model = nn.Sequential(RMSNorm(512), nn.Linear(512, 1024, bias=False)).eval()
    x = torch.randn(1, 128, 512)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    fusions = [line for line in exe.hlo.splitlines() if " fusion(" in line]
    assert len(fusions) == 1 and "kind=kInput" in fusions[0]
    assert not small_runs(exe)
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x).detach(), "bf16")


class RopeAttention(nn.Module):
    """HF Llama's attention core: q/k projections, apply_rotary_pos_emb (rotate_half: slices, negate, cat),
    causal softmax attention; returns the rotated k too (as the KV cache does)."""

    def __init__(self, d: int, heads: int, seq: int):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v = (nn.Linear(d, d, bias=False) for _ in range(3))
        inv = 1.0 / (10000 ** (torch.arange(0, self.dh, 2).float() / self.dh))
        freqs = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None])
        self.register_buffer("sin", emb.sin()[None, None])

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.heads, self.dh).transpose(1, 2) for p in (self.q, self.k, self.v))
        q = q * self.cos + self.rotate_half(q) * self.sin
        k = k * self.cos + self.rotate_half(k) * self.sin
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, t, -1), k


def test_rope_is_one_loop_kernel_without_transposing_stores():
    """rotate_half's slices, negate and cat and the cos/sin multiply-adds become one loop kernel per
    RoPE (no concatenate or negate kernel), and the rotated q is stored in rows: stored K-major for the
    attention it wrote one element per DMA descriptor."""
    torch.manual_seed(0)
    model = RopeAttention(256, 4, 128).eval()
    x = torch.randn(1, 128, 256)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    assert " concatenate(" not in exe.hlo and " negate(" not in exe.hlo
    assert not small_runs(exe, below=128)
    out = exe.run(x, check=True)
    for got, want in zip(out, model(x), strict=True):
        assert_close(got, want.detach(), "bf16")
