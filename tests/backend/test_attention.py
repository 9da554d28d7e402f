"""Attention as one flash kernel (kind=kCustom): chunked online softmax over keys, odd sizes, masks
(chunks a constant causal mask removes are skipped), bf16 operands, fused from raw HLO by the pass."""

from __future__ import annotations

import numpy as np
import pytest

from backend import compile_module
from compiler.passes.fusion.fusion_pass import FusionPass
from hlo.parser import parse_module
from isa.emulator import run_program
from tests.backend.util import BF16, REDUCERS, rand


def attention_text(b, h, tq, tk, dh, dv, mask: str, fused: bool, dtype: str = "f32", scale: float = 0.125) -> str:
    """softmax(scale * q k^T + mask) v over [b, h]; mask: "none", "param" (f32[tq,tk]) or "causal" (a
    constant). With dtype bf16, q/k/v are bf16, scores f32, p converted to bf16 for the second dot."""
    q, k, v = f"{dtype}[{b},{h},{tq},{dh}]", f"{dtype}[{b},{h},{tk},{dh}]", f"{dtype}[{b},{h},{tk},{dv}]"
    s, r = f"f32[{b},{h},{tq},{tk}]", f"f32[{b},{h},{tq}]"
    params = [("q", q), ("k", k), ("v", v)] + ([("m", f"f32[{tq},{tk}]")] if mask == "param" else [])
    lines = [f"  %q = {q} parameter(0)", f"  %k = {k} parameter(1)", f"  %v = {v} parameter(2)"]
    if mask == "param":
        lines.append(f"  %m = f32[{tq},{tk}] parameter(3)")
    if mask == "causal":
        lines.append(f'  %m = f32[{tq},{tk}] constant({{...}}), data="causal"')
    lines += [f"  %s = {s} dot(%q, %k), lhs_batch_dims={{0,1}}, rhs_batch_dims={{0,1}}, "
              "lhs_contracting_dims={3}, rhs_contracting_dims={3}",
              f"  %sc = f32[] constant({scale})", f"  %scb = {s} broadcast(%sc), dimensions={{}}",
              f"  %xs = {s} multiply(%s, %scb)"]
    if mask != "none":
        lines += [f"  %mb = {s} broadcast(%m), dimensions={{2,3}}", f"  %x = {s} add(%xs, %mb)"]
    else:
        lines += [f"  %x = {s} copy(%xs)"]
    lines += ["  %ninf = f32[] constant(-inf)",
              f"  %mx = {r} reduce(%x, %ninf), dimensions={{3}}, to_apply=%max_f32",
              f"  %mxb = {s} broadcast(%mx), dimensions={{0,1,2}}", f"  %sub = {s} subtract(%x, %mxb)",
              f"  %e = {s} exponential(%sub)", "  %zero = f32[] constant(0)",
              f"  %sum = {r} reduce(%e, %zero), dimensions={{3}}, to_apply=%add_f32",
              f"  %sumb = {s} broadcast(%sum), dimensions={{0,1,2}}", f"  %p = {s} divide(%e, %sumb)"]
    pv = "%p"
    if dtype != "f32":
        lines.append(f"  %pc = {dtype}[{b},{h},{tq},{tk}] convert(%p)")
        pv = "%pc"
    out = f"f32[{b},{h},{tq},{dv}]"
    lines.append(f"  %o = {out} dot({pv}, %v), lhs_batch_dims={{0,1}}, rhs_batch_dims={{0,1}}, "
                 "lhs_contracting_dims={3}, rhs_contracting_dims={2}")
    lines[-1] = lines[-1].replace("  %o =", "  ROOT %o =")
    sig = ", ".join(f"{n}: {t}" for n, t in params)
    body = "\n".join(lines)
    if not fused:
        return f"HloModule attn\n\n{REDUCERS}\nENTRY %main ({sig}) -> {out} {{\n{body}\n}}\n"
    body = body.replace('  %m = f32', '  %m0 = f32') if mask == "causal" else body
    inner_params = params + ([("m0", f"f32[{tq},{tk}]")] if mask == "causal" else [])
    body = body.replace(f'%m0 = f32[{tq},{tk}] constant({{...}}), data="causal"', f"%m0 = f32[{tq},{tk}] parameter(3)")
    body = body.replace("broadcast(%m)", "broadcast(%m0)") if mask == "causal" else body
    isig = ", ".join(f"{n}: {t}" for n, t in inner_params)
    args = ", ".join(f"%a{i}" for i in range(len(inner_params)))
    entry = [f"  %a{i} = {t} parameter({i})" for i, (_, t) in enumerate(params)]
    if mask == "causal":
        entry.append(f'  %a3 = f32[{tq},{tk}] constant({{...}}), data="causal"')
    esig = ", ".join(f"a{i}: {t}" for i, (_, t) in enumerate(params))
    return (f"HloModule attn\n\n{REDUCERS}\n%fused_attention ({isig}) -> {out} {{\n{body}\n}}\n\n"
            f"ENTRY %main ({esig}) -> {out} {{\n" + "\n".join(entry)
            + f"\n  ROOT %f = {out} fusion({args}), kind=kCustom, calls=%fused_attention\n}}\n")


def reference(q, k, v, mask, scale=0.125):
    x = scale * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
    if mask is not None:
        x = x + mask
    e = np.exp(x - x.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", e / e.sum(-1, keepdims=True), v.astype(np.float64))


def causal(tq, tk):
    return np.triu(np.full((tq, tk), -np.inf, dtype=np.float32), 1 + tk - tq)


def run(text, inputs, consts=None, fuse=False):
    module = parse_module(text, constants=consts)
    if fuse:
        FusionPass().run(module)
    result = compile_module(module, "trn1")
    feeds = {f"in{i}": x for i, x in enumerate(inputs)}
    return run_program(result.program, feeds, check=True).outputs["out0"], result


@pytest.mark.parametrize("b,h,tq,tk,dh,dv,mask", [
    (1, 2, 128, 128, 64, 64, "param"),
    (2, 1, 200, 700, 32, 48, "param"),   # 2 chunks of keys (512 + 188), partial query block
    (1, 1, 5, 1, 16, 8, "none"),          # a single key: softmax is 1
    (1, 1, 130, 1100, 64, 64, "causal"),  # 3 chunks, the last ones skipped for the first queries
])
def test_fused_attention(b, h, tq, tk, dh, dv, mask):
    q, k, v = rand(b, h, tq, dh, seed=1), rand(b, h, tk, dh, seed=2), rand(b, h, tk, dv, seed=3)
    m = causal(tq, tk) if mask == "causal" else (rand(tq, tk, seed=4) if mask == "param" else None)
    inputs = [q, k, v] + ([m] if mask == "param" else [])
    consts = {"causal": m} if mask == "causal" else None
    out, result = run(attention_text(b, h, tq, tk, dh, dv, mask, fused=True), inputs, consts)
    np.testing.assert_allclose(out, reference(q, k, v, m), rtol=1e-4, atol=1e-4)
    assert not [t for t in result.program.tensors.values() if t.kind == "scratch"]  # nothing via HBM


def test_causal_chunks_are_skipped():
    tq = tk = 1024
    q, k, v = rand(1, 1, tq, 64, seed=1), rand(1, 1, tk, 64, seed=2), rand(1, 1, tk, 64, seed=3)
    m = causal(tq, tk)
    out, result = run(attention_text(1, 1, tq, tk, 64, 64, "causal", fused=True), [q, k, v], {"causal": m})
    np.testing.assert_allclose(out, reference(q, k, v, m), rtol=1e-4, atol=1e-4)
    qk = [i for i in result.program.instructions if i.comment.endswith(" qk")]
    assert len(qk) == 4 * 1 + 4 * 2  # 8 query blocks: the first 4 see one chunk of 512 keys, the rest two


def test_bf16_attention():
    b, h, t, d = 1, 2, 160, 64
    q, k, v = (rand(b, h, t, d, seed=s).astype(BF16) for s in (1, 2, 3))
    m = rand(t, t, seed=4)
    out, _ = run(attention_text(b, h, t, t, d, d, "param", fused=True, dtype="bf16"), [q, k, v, m])
    expected = reference(*(x.astype(np.float32) for x in (q, k, v)), m)
    np.testing.assert_allclose(out, expected, rtol=2e-2, atol=2e-2)


def test_fusion_pass_builds_the_attention_kernel():
    b, h, t, d = 2, 2, 96, 32
    q, k, v, m = rand(b, h, t, d, seed=1), rand(b, h, t, d, seed=2), rand(b, h, t, d, seed=3), rand(t, t, seed=4)
    text = attention_text(b, h, t, t, d, d, "param", fused=False)
    module = parse_module(text)
    fusion = FusionPass()
    fusion.run(module)
    assert [i.attrs.get("kind") for i in module.entry.instructions if i.opcode == "fusion"] == ["kCustom"]
    assert any(line.startswith("FUSED   kCustom") for line in fusion.decision_lines())
    out, _ = run(text, [q, k, v, m], fuse=True)
    np.testing.assert_allclose(out, reference(q, k, v, m), rtol=1e-4, atol=1e-4)


def test_bf16_attention_accumulates_in_the_transpose_banks():
    """With a 2-byte P, P^T blocks take half of each transpose bank and the output accumulators the other
    half (over two chunks of keys too): the kernel takes 4 PSUM banks, and the result is exact."""
    b, h, tq, tk, d = 1, 2, 200, 700, 64
    q, k, v = (rand(b, h, t, d, seed=s).astype(BF16) for s, t in ((1, tq), (2, tk), (3, tk)))
    m = rand(tq, tk, seed=4)
    out, result = run(attention_text(b, h, tq, tk, d, d, "param", fused=True, dtype="bf16"), [q, k, v, m])
    expected = reference(*(x.astype(np.float32) for x in (q, k, v)), m)
    np.testing.assert_allclose(out, expected, rtol=2e-2, atol=2e-2)
    assert "peak PSUM: 4 of 8 banks" in result.memory_plan
