"""Small models that together exercise every rule of the lowering table (see test_op_table.py).

Each case names the ATen overloads it must reach on at least one capture path. Internal and core-ATen
overloads that no user writes (``_softmax``, ``native_layer_norm``...) come from the "core" capture
(torch's full core-ATen decomposition) or from calling ``torch.ops.aten`` directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

aten = torch.ops.aten


class Fn(nn.Module):
    """A function (of the inputs) as a module; ``params`` become parameters the function can read."""

    def __init__(self, fn: Callable, **params: torch.Tensor):
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            self.register_buffer(name, value)

    def forward(self, *xs: torch.Tensor):
        return self.fn(self, *xs)


@dataclass(frozen=True)
class Case:
    name: str
    ops: tuple[str, ...]                       # ATen overloads (without "aten.") the case must reach
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    captures: tuple[str, ...] = ("export", "fx")


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


def fn(f: Callable, **params: torch.Tensor) -> Callable[[], nn.Module]:
    return lambda: Fn(f, **params)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding="same", dilation=1, groups=8, bias=False)
        self.c1d = nn.Conv1d(8, 4, 3, dilation=2, padding=2)
        self.bn = nn.BatchNorm2d(8)
        self.gn = nn.GroupNorm(2, 8)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 2)

    def forward(self, x):
        y = self.gn(self.dw(self.bn(self.c1(x))))
        z = self.c1d(y.flatten(2))
        return y, z, F.conv2d(x, self.c1.weight, None, 1, "valid"), F.conv1d(z, self.c1d.weight[:, :4], groups=1)


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.grouped = nn.ConvTranspose2d(4, 6, (3, 2), stride=(1, 2), groups=2, dilation=(2, 1), bias=False)
        self.up1d = nn.ConvTranspose1d(4, 2, 4, stride=3, padding=2)

    def forward(self, x):
        return self.up(x), self.grouped(x), self.up1d(x.flatten(2)), F.conv_transpose2d(x, self.up.weight, stride=2)


class Pools(nn.Module):
    def forward(self, x):
        a = F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1)
        b = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        c = F.max_pool2d(x, 2, ceil_mode=True, dilation=1) + F.avg_pool2d(x, 2, ceil_mode=True, divisor_override=3)
        d = F.adaptive_avg_pool2d(x, 1).flatten(1) + F.adaptive_avg_pool2d(x, (3, 2)).sum((2, 3))
        s = x.flatten(2)
        e = F.max_pool1d(s, 4, 3, 1) + F.avg_pool1d(s, 4, 3, 1)
        f = F.adaptive_avg_pool1d(s, 7) + F.adaptive_avg_pool1d(s, 5).sum(-1, keepdim=True)
        return a, b, c, d, e, f


class InPlace(nn.Module):
    """In-place methods on tensors the forward made (traced as their out-of-place ops), dunder calls,
    torch.is_floating_point on a traced value."""

    def forward(self, x, mask):
        y = torch.zeros_like(x)
        y.masked_fill_(mask, 2.0)
        y.add_(x).mul_(3)
        z = x.clone()
        z.clamp_(-0.5, 0.5)
        w = x.__gt__(0).__and__(mask) if not torch.is_floating_point(mask) else x
        return y, z, w, x.__rsub__(1), x.__neg__()


class Writes(nn.Module):
    """Item assignment (fx: operator.setitem; export: copy, slice/select_scatter, index_put)."""

    def forward(self, x, i):
        y = x * 2
        y[:, 0] = 5.0
        y[1] = x[0]
        y[:, 2:4] = x[:, :2] + 1
        y[::2, 4] = -1.0
        y[2, 1::2] = x[3, :3]
        z = x.new_zeros(4, 6)
        z[i] = 1.0
        z[i, 1] = x[:2, 0]
        w = x.clone()
        w[..., -1] += 3
        v = x.clone()
        v[i] += x[:2]
        return y, z, w, v, aten.index_put.default(x, [i], x[:2] * 3, True), aten.select_scatter.default(x, x[0], 0, -1)


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(8, 12, bias=False)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(x.transpose(0, 1), torch.ones(1, 2, 12) * 0.5)
        return y, h, c, z, hg


class FastPath(nn.Module):
    """The native kernels nn.TransformerEncoderLayer and nn.MultiheadAttention use at inference."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.pre = nn.TransformerEncoderLayer(16, 4, 24, batch_first=True, norm_first=True, activation="gelu")

    def forward(self, x):
        outs = []
        for layer, gelu in ((self.enc, False), (self.pre, True)):
            a, n1, n2 = layer.self_attn, layer.norm1, layer.norm2
            outs.append(aten._transformer_encoder_layer_fwd.default(
                x, 16, a.num_heads, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias, gelu,
                layer.norm_first, n1.eps, n1.weight, n1.bias, n2.weight, n2.bias, layer.linear1.weight,
                layer.linear1.bias, layer.linear2.weight, layer.linear2.bias))
        a = self.enc.self_attn
        outs.append(aten._native_multi_head_attention.default(
            x, x * 2, x, 16, 2, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias,
            need_weights=False)[0])
        return outs


CASES: list[Case] = [
    Case("arith", ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "rsub.Scalar", "neg.default",
                   "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "square.default", "abs.default",
                   "reciprocal.default", "sign.default"),
         fn(lambda m, x, y: (x + y * 2 - x / (y.abs() + 1), 1 - x, -x, x ** 3, y.abs() ** x.sigmoid(),
                             2 ** x, torch.square(x), torch.reciprocal(y), torch.sign(x))),
         lambda: (r(3, 4), r(3, 4))),
    Case("scalar overloads", ("add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar", "div.Scalar_mode",
                              "rsub.Tensor", "eq.Scalar", "ne.Scalar", "lt.Scalar", "le.Scalar", "gt.Scalar",
                              "ge.Scalar", "masked_fill.Tensor", "clamp.Tensor"),
         fn(lambda m, x, y: (aten.add.Scalar(x, 2), aten.sub.Scalar(x, 1.5), aten.mul.Scalar(x, 3),
                             aten.div.Scalar(x, 4), aten.div.Scalar_mode(x * 5, 2, rounding_mode="floor"),
                             aten.rsub.Tensor(x, y), aten.eq.Scalar(x.round(), 0), aten.ne.Scalar(x.round(), 0),
                             aten.lt.Scalar(x, 0), aten.le.Scalar(x, 0.5), aten.gt.Scalar(x, 0),
                             aten.ge.Scalar(x, -0.5), aten.masked_fill.Tensor(x, y > 0, torch.tensor(7.0)),
                             torch.clamp(x, y, y + 1))),
         lambda: (r(3, 4), r(3, 4)), captures=("fx",)),
    Case("division", ("div.Tensor_mode", "fmod.Scalar", "fmod.Tensor", "remainder.Scalar", "remainder.Tensor"),
         fn(lambda m, x, y: (torch.div(x * 7, y, rounding_mode="floor"), torch.div(x * 7, 2, rounding_mode="trunc"),
                             torch.fmod(x * 5, 2), torch.fmod(x * 5, y), x % 1.5, torch.remainder(x * 5, y),
                             torch.remainder(torch.arange(-5, 5), 3))),
         lambda: (r(3, 4), r(3, 4).abs() + 0.5)),
    Case("unary math", ("exp.default", "log.default", "sqrt.default", "rsqrt.default", "erf.default", "sin.default",
                        "cos.default", "floor.default", "ceil.default", "round.default", "round.decimals",
                        "trunc.default", "log1p.default", "expm1.default", "log2.default", "log10.default",
                        "exp2.default"),
         fn(lambda m, x: (x.exp(), x.abs().log(), x.abs().sqrt(), (x.abs() + 1).rsqrt(), torch.erf(x), x.sin(),
                          x.cos(), (x * 3).floor(), (x * 3).ceil(), (x * 3).round(), torch.round(x, decimals=1),
                          (x * 3).trunc(), x.abs().log1p(), x.expm1(), x.abs().log2(), x.abs().log10(),
                          torch.exp2(x))),
         lambda: (r(4, 5),)),
    Case("compare and select", ("eq.Tensor", "ne.Tensor", "lt.Tensor", "le.Tensor", "gt.Tensor", "ge.Tensor",
                                "where.self", "masked_fill.Scalar", "maximum.default", "minimum.default",
                                "clamp.default", "clamp_min.default", "clamp_max.default"),
         fn(lambda m, x, y: (x == y, x != y, x < y, x <= y, x > y, x >= y, torch.where(x > 0, x, y),
                             x.masked_fill(y > 0, -1.0), torch.maximum(x, y), torch.minimum(x, y),
                             x.clamp(-0.5, 0.5), x.clamp_min(0.1), torch.clamp_max(x, 0.2))),
         lambda: (r(3, 4), r(3, 4))),
    Case("logical and bitwise", ("logical_and.default", "logical_or.default", "logical_xor.default",
                                 "logical_not.default", "bitwise_and.Tensor", "bitwise_or.Tensor",
                                 "bitwise_xor.Tensor", "bitwise_and.Scalar", "bitwise_or.Scalar",
                                 "bitwise_xor.Scalar", "bitwise_not.default", "__and__.Tensor", "__or__.Tensor",
                                 "__xor__.Tensor"),
         fn(lambda m, x, n: (torch.logical_and(x > 0, n), torch.logical_or(x > 0, n), torch.logical_xor(x, n),
                             torch.logical_not(n), (x > 0) & (n > 1), n | 2, n ^ 5, ~n, n | (n * 3), n ^ (n + 1),
                             aten.bitwise_and.Scalar(n, 6))),
         lambda: (r(6), torch.arange(6))),
    Case("activations", ("relu.default", "gelu.default", "silu.default", "sigmoid.default", "tanh.default",
                         "leaky_relu.default", "elu.default", "softplus.default", "hardswish.default",
                         "hardsigmoid.default", "hardtanh.default", "relu6.default", "mish.default", "glu.default"),
         fn(lambda m, x: (F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), torch.sigmoid(x),
                          torch.tanh(x), F.leaky_relu(x, 0.1), F.elu(x, 0.7), F.softplus(x, 2, 3), F.hardswish(x),
                          F.hardsigmoid(x), F.hardtanh(x, -0.3, 0.4), aten.relu6.default(x), F.relu6(x), F.mish(x),
                          F.glu(x, 1))),
         lambda: (r(3, 8) * 4,)),
    Case("more activations", ("selu.default", "celu.default", "log_sigmoid.default", "prelu.default",
                              "_prelu_kernel.default"),
         fn(lambda m, x: (F.selu(x), F.celu(x, 0.5), F.logsigmoid(x * 30), F.prelu(x, m.w), F.prelu(x, m.w[:1]),
                          aten._prelu_kernel.default(x, m.w[:1])), w=torch.tensor([0.1, -0.2, 0.3])),
         lambda: (r(2, 3, 4) * 3,)),
    Case("activation modules", ("softplus.default", "mish.default", "hardswish.default", "glu.default"),
         lambda: nn.Sequential(nn.Softplus(beta=0.5), nn.Mish(), nn.Hardswish(), nn.Hardsigmoid(), nn.ReLU6(),
                               nn.GLU()),
         lambda: (r(2, 6) * 3,)),
    Case("matmul family", ("mm.default", "addmm.default", "bmm.default", "baddbmm.default", "matmul.default",
                           "linear.default", "t.default"),
         fn(lambda m, x, y, z: (torch.mm(x, y), torch.addmm(m.b, x, y, beta=0.5, alpha=2), torch.bmm(z, z),
                                torch.baddbmm(z, z, z, beta=2, alpha=0.5), x @ y, torch.matmul(x[0], y),
                                F.linear(x, y.t(), m.b)), b=r(4)),
         lambda: (r(3, 4), r(4, 4), r(2, 4, 4))),
    Case("einsum", ("einsum.default",),
         fn(lambda m, x, y, v: (torch.einsum("bij,bjk->bik", x, y), torch.einsum("bij->j", x),
                                torch.einsum("i,i->", v, v), torch.einsum("...ij,...kj", x, y),
                                torch.einsum("bij,bjk,k->bi", x, y, v))),
         lambda: (r(2, 3, 4), r(2, 4, 4), r(4))),
    Case("attention", ("scaled_dot_product_attention.default", "softmax.int", "log_softmax.int"),
         fn(lambda m, q, k, v, mask: (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                      F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                      F.scaled_dot_product_attention(q, k, v, attn_mask=mask.float() * -2.0,
                                                                     scale=0.3),
                                      F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True),
                                      torch.softmax(q, -1), torch.log_softmax(q, 1))),
         lambda: (r(2, 2, 5, 8), r(2, 2, 5, 8), r(2, 2, 5, 8), torch.rand(5, 5) > 0.3)),
    Case("norms", ("layer_norm.default", "batch_norm.default", "group_norm.default", "rms_norm.default",
                   "instance_norm.default"),
         fn(lambda m, x: (F.layer_norm(x, (6,), m.w, m.b), F.layer_norm(x, (4, 6)),
                          F.batch_norm(x, m.rm, m.rv, m.w4, m.b4, False, 0.1, 1e-3), F.group_norm(x, 2, m.w4, m.b4),
                          F.rms_norm(x, (6,), m.w), F.rms_norm(x, (4, 6), eps=1e-3),
                          F.instance_norm(x, weight=m.w4, bias=m.b4), nn.InstanceNorm1d(4)(x),
                          F.instance_norm(x, m.rm, m.rv, use_input_stats=False)),
            w=r(6), b=r(6), w4=r(4), b4=r(4), rm=r(4), rv=torch.rand(4) + 0.5),
         lambda: (r(2, 4, 6),)),
    Case("core norms", ("native_layer_norm.default", "_native_batch_norm_legit_no_training.default",
                        "native_group_norm.default", "_softmax.default", "_log_softmax.default"),
         fn(lambda m, x: (F.layer_norm(x, (6,), m.w, m.b), F.batch_norm(x, m.rm, m.rv, m.w4, m.b4, False),
                          F.group_norm(x, 2, m.w4, m.b4), torch.softmax(x, -1), torch.log_softmax(x, 1)),
            w=r(6), b=r(6), w4=r(4), b4=r(4), rm=r(4), rv=torch.rand(4) + 0.5),
         lambda: (r(2, 4, 6),), captures=("core",)),
    Case("convolutions", ("convolution.default", "batch_norm.default", "group_norm.default"),
         ConvNet, lambda: (r(2, 3, 9, 9),)),
    Case("transposed convolutions", ("convolution.default",), Transposed, lambda: (r(2, 4, 5, 6),)),
    Case("pooling", ("max_pool2d.default", "avg_pool2d.default", "adaptive_avg_pool2d.default", "max_pool1d.default",
                     "avg_pool1d.default", "adaptive_avg_pool1d.default"),
         Pools, lambda: (r(2, 3, 7, 6),)),
    Case("resizing", ("upsample_nearest2d.vec", "upsample_nearest1d.vec", "upsample_bilinear2d.vec",
                      "upsample_linear1d.vec"),
         fn(lambda m, x: (F.interpolate(x, scale_factor=2), F.interpolate(x, size=(5, 7)),
                          F.interpolate(x, size=(6, 9), mode="bilinear"),
                          F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                          F.interpolate(x, scale_factor=(0.5, 0.75), mode="bilinear"), F.interpolate(x[:, :, 0], 9),
                          F.interpolate(x[:, :, 1], scale_factor=2.5, mode="linear"),
                          nn.Upsample(scale_factor=3)(x))),
         lambda: (r(2, 3, 4, 6),)),
    Case("core pooling", ("_adaptive_avg_pool2d.default",),
         fn(lambda m, x: F.adaptive_avg_pool2d(x, (2, 3))), lambda: (r(1, 2, 4, 6),), captures=("core",)),
    Case("pool modules", ("max_pool2d.default", "avg_pool2d.default", "adaptive_avg_pool2d.default"),
         lambda: nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(2, 1, 1), nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten()),
         lambda: (r(2, 3, 8, 8),)),
    Case("reductions", ("sum.default", "sum.dim_IntList", "mean.default", "mean.dim", "amax.default",
                        "amin.default", "var.correction", "std.correction", "prod.default", "prod.dim_int",
                        "logsumexp.default"),
         fn(lambda m, x: (x.sum(), x.sum((0, 2), keepdim=True), x.mean(), x.mean(-1), x.amax(1), x.amin((0, 1)),
                          x.var(1), x.std(-1, correction=0, keepdim=True), x.prod(), torch.prod(x, 1, keepdim=True),
                          torch.logsumexp(x, -1), torch.logsumexp(torch.full((2, 3), float("-inf")), 1))),
         lambda: (r(2, 3, 4),)),
    Case("special values and stats", ("isnan.default", "isinf.default", "isfinite.default", "nan_to_num.default",
                                      "var_mean.correction", "std_mean.correction", "outer.default", "diff.default"),
         fn(lambda m, x: (torch.isnan(x.log()), torch.isinf(1 / x.round()), torch.isfinite(x.log()),
                          torch.nan_to_num(x.log()), torch.nan_to_num(1 / x.round(), 1.0, 2.0, -3.0), torch.isnan(m.n),
                          *torch.var_mean(x, 1), *torch.std_mean(x, (0, 1), correction=0, keepdim=True),
                          torch.outer(x[0, 0], x[1, 1]), torch.diff(x), torch.diff(x, 2, 0, prepend=x[:1]),
                          torch.diff(x > 0, dim=1, append=x[:, :1] > 0)), n=torch.arange(3)),
         lambda: (r(2, 3, 4),)),
    Case("vector norms", ("linalg_vector_norm.default",),
         fn(lambda m, x: (F.normalize(x, dim=1), torch.norm(x, dim=-1), x.norm(),
                          torch.linalg.vector_norm(x, 1, (0, 2)),
                          torch.linalg.vector_norm(x, float("inf"), 1, keepdim=True), torch.linalg.vector_norm(x, 3),
                          torch.linalg.vector_norm(x.round(), 0, -1), torch.linalg.vector_norm(x, -float("inf")))),
         lambda: (r(2, 3, 4),)),
    Case("arg reductions", ("argmax.default", "argmin.default", "max.dim", "min.dim", "max.default",
                            "min.default"),
         fn(lambda m, x: (x.argmax(), x.argmax(1), x.argmin(-1, keepdim=True), torch.max(x, 1).values,
                          x.max(dim=0).indices, torch.min(x, -1)[1], x.min(2, keepdim=True)[0], x.max(), torch.min(x),
                          torch.argmax(x.round(), 2))),
         lambda: (r(3, 4, 5),)),
    Case("any all cumulative", ("any.default", "any.dim", "any.dims", "all.default", "all.dim", "cumsum.default",
                                "cumprod.default"),
         fn(lambda m, x: ((x > 1).any(), (x > 1).any(1), aten.any.dims(x > 1, [0, 2]), (x > -2).all(),
                          torch.all(x > -1, -1), x.cumsum(1), torch.cumsum(torch.arange(6), 0),
                          (x / 2).cumprod(-1))),
         lambda: (r(3, 4, 5),)),
    Case("sort topk", ("sort.default", "sort.stable", "argsort.default", "argsort.stable", "msort.default",
                       "topk.default"),
         fn(lambda m, x, n: (*torch.sort(x, 1), *torch.sort(x, dim=0, descending=True, stable=True),
                             torch.argsort(x, -1), torch.argsort(n, dim=0, stable=True), torch.msort(x),
                             *torch.topk(x, 3), torch.topk(x, 2, dim=0, largest=False).indices,
                             x.sort(stable=True).values, torch.sort(n, stable=True)[1])),
         lambda: (r(3, 4, 5), torch.randint(-3, 3, (6, 2)))),
    Case("indexing", ("embedding.default", "index_select.default", "gather.default", "index.Tensor", "flip.default"),
         fn(lambda m, ids, x, idx: (F.embedding(ids, m.w), x.index_select(1, idx), torch.gather(x, 1, m.g),
                                    x[idx], x[:, idx], x[idx, idx], x[..., idx - 3], x[0, idx, 1:], x.flip(0, 2),
                                    torch.flip(x, (-1,))),
            w=r(10, 6), g=torch.randint(0, 4, (3, 2, 5))),
         lambda: (ints(10, 2, 5), r(3, 4, 5), torch.tensor([2, 0, 1]))),
    Case("internal index", ("_unsafe_index.Tensor", "_unsafe_view.default", "alias.default", "detach.default",
                            "lift_fresh_copy.default", "scalar_tensor.default", "_assert_tensor_metadata.default",
                            "_to_copy.default"),
         fn(lambda m, x, idx: (aten._unsafe_index.Tensor(x, [None, idx]), aten._unsafe_view.default(x, [12, 5]),
                               aten.alias.default(x), aten.detach.default(x), aten.lift_fresh_copy.default(x),
                               aten.scalar_tensor.default(3.5),
                               (aten._assert_tensor_metadata.default(x, dtype=torch.float32), x)[1] * 2,
                               aten._to_copy.default(x, dtype=torch.float16))),
         lambda: (r(3, 4, 5), torch.tensor([3, 1]))),
    Case("conversions", ("to.dtype", "to.dtype_layout", "type_as.default", "_to_copy.default", "dropout.default"),
         fn(lambda m, x, n: (x.to(torch.bfloat16), aten.to.dtype(x, torch.int32), aten.to.dtype_layout(
                             x, dtype=torch.float16), x.type_as(n), n.float() / 3, x.long(), x.bool(),
                             F.dropout(x, 0.5, training=False), aten.dropout.default(x, 0.2, False))),
         lambda: (r(3, 4) * 5, torch.arange(4))),
    Case("factories", ("full.default", "zeros.default", "ones.default", "full_like.default", "zeros_like.default",
                       "ones_like.default", "new_zeros.default", "new_ones.default", "new_full.default",
                       "fill.Scalar", "arange.default", "arange.start", "arange.start_step"),
         fn(lambda m, x: (torch.full((2, 3), 1.5) + torch.zeros(2, 3) + torch.ones(3), torch.full_like(x, 7),
                          torch.zeros_like(x, dtype=torch.int32), torch.ones_like(x), x.new_zeros(2, 4),
                          x.new_ones((3,)), x.new_full((2,), 4), aten.fill.Scalar(x, 2), torch.arange(5),
                          torch.arange(2, 7), torch.arange(1, 2, 0.25), aten.arange.start(3, 6),
                          torch.arange(x.shape[0]) * x[:, 0])),
         lambda: (r(3, 4),)),
    Case("shape", ("view.default", "reshape.default", "permute.default", "transpose.int", "expand.default",
                   "unsqueeze.default", "squeeze.dim", "squeeze.dims", "squeeze.default", "flatten.using_ints",
                   "unflatten.int", "movedim.int", "view_as.default", "reshape_as.default", "expand_as.default",
                   "clone.default", "contiguous.default"),
         fn(lambda m, x, y: (x.view(4, 6), x.reshape(-1, 2), aten.reshape.default(x, [3, 8]), x.permute(2, 0, 1),
                             x.transpose(0, 2),
                             y.expand(2, 3, 4), x.unsqueeze(1), y.squeeze(0), aten.squeeze.dims(y, [0, 1]),
                             aten.squeeze.default(y), x.flatten(1), x.unflatten(2, (2, 2)), torch.movedim(x, 0, -1),
                             x.view_as(m.z), x.reshape_as(m.z), y.expand_as(x), x.clone(), aten.contiguous.default(x)),
            z=torch.zeros(6, 4)),
         lambda: (r(2, 3, 4), r(1, 1, 4))),
    Case("slicing and joining", ("cat.default", "stack.default", "split.Tensor", "split_with_sizes.default",
                                 "chunk.default", "unbind.int", "slice.Tensor", "select.int", "narrow.default",
                                 "roll.default", "repeat.default", "tril.default", "triu.default"),
         fn(lambda m, x, y: (torch.cat([x, y], 1), torch.stack([x, y], -1), *x.split(2, 1), *x.split([1, 3], 1),
                             *torch.chunk(x, 2, 0), *y.unbind(1), x[1:, ::2], x[:, -1], x.narrow(1, 1, 2),
                             torch.narrow(x, 0, -2, 1), x.roll(1, 0), torch.roll(x, (2, -1), (1, 0)), x.roll(3),
                             x.repeat(2, 1, 3), x.tril(), torch.triu(x, 1), torch.tril(y, -1))),
         lambda: (r(3, 4), r(3, 4))),
    Case("padding", ("constant_pad_nd.default", "pad.default"),
         fn(lambda m, x: (F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=3.0), F.pad(x, (2, 1), mode="reflect"),
                          F.pad(x, (1, 2, 2, 1), mode="replicate"), F.pad(x, (1, 3), mode="circular"),
                          aten.constant_pad_nd.default(x, [0, -1, 1, 1], 0.5))),
         lambda: (r(2, 3, 5),)),
    Case("recurrent", ("lstm.input", "gru.input"), Recurrent, lambda: (r(2, 5, 8),)),
    Case("writes", ("slice_scatter.default", "select_scatter.default", "index_put.default", "copy.default"),
         Writes, lambda: (r(4, 6), torch.tensor([0, 2]))),
    Case("element scatters", ("scatter.src", "scatter.value", "scatter_add.default"),
         fn(lambda m, x, i: (x.scatter(0, i, x[2:4] * 2), x.scatter(1, i, 1.5), x.scatter_add(1, i, x[:2]))),
         lambda: (r(4, 6), torch.tensor([[3, 1, 0, 2, 0, 1], [0, 0, 3, 1, 2, 3]]))),
    Case("in-place methods", ("masked_fill.Scalar", "add.Tensor", "mul.Tensor", "clamp.default", "bitwise_and.Tensor"),
         InPlace, lambda: (r(3, 4), torch.rand(3, 4) > 0.5), captures=("fx",)),
    Case("fused inference kernels", ("_transformer_encoder_layer_fwd.default", "_native_multi_head_attention.default"),
         FastPath, lambda: (r(2, 5, 16),), captures=("fx",)),
    Case("t and inline constant", ("t.default", "view.default"),
         fn(lambda m, x: (x.t() @ x, x.T.reshape(2, -1), torch.tensor([1.0, 2.0]) * x[:, :2] / math.pi)),
         lambda: (r(3, 4),)),
]
