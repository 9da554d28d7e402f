"""Helpers of the backend tests: HLO text for dots and MLPs, compile + emulate (checked mode)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from backend import BackendOptions, BackendResult, compile_module
from hlo.parser import parse_module
from isa.emulator import run_program

BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = {"f32": dict(rtol=1e-4, atol=1e-4), "bf16": dict(rtol=2e-2, atol=2e-2)}


def run_hlo(text: str, inputs: list[np.ndarray], constants: dict[str, np.ndarray] | None = None,
            options: BackendOptions | None = None, target: str = "trn1",
            check: bool = True) -> tuple[list[np.ndarray], BackendResult]:
    module = parse_module(text, constants=constants)
    result = compile_module(module, target, options=options)
    feeds = {f"in{i}": x for i, x in enumerate(inputs)}
    run = run_program(result.program, feeds, check=check)
    return [run.outputs[name] for name in result.program.outputs], result


def rand(*shape: int, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def bf16_round(x: np.ndarray) -> np.ndarray:
    return x.astype(BF16).astype(np.float32)


def shape(dtype: str, dims: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def dot_text(m: int, k: int, n: int, dtype: str = "f32", lhs_transposed: bool = False,
             rhs_transposed: bool = False) -> str:
    """ROOT = dot(x, w) with x, w parameters (optionally stored [K, M] / [N, K])."""
    x_dims, lc = ((k, m), 0) if lhs_transposed else ((m, k), 1)
    w_dims, rc = ((n, k), 1) if rhs_transposed else ((k, n), 0)
    x, w = shape(dtype, x_dims), shape(dtype, w_dims)
    return f"""HloModule dot
ENTRY %main (x: {x}, w: {w}) -> f32[{m},{n}] {{
  %x = {x} parameter(0)
  %w = {w} parameter(1)
  ROOT %dot = f32[{m},{n}] dot(%x, %w), lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{{rc}}}
}}
"""


ACT_EPILOGUES = {  # name -> (HLO lines applied to %biased giving %act, numpy function)
    "relu": ("  %zero = f32[] constant(0)\n  %zeros = f32[{m},{n}] broadcast(%zero), dimensions={{}}\n"
             "  ROOT %act = f32[{m},{n}] maximum(%biased, %zeros)", lambda v: np.maximum(v, 0)),
    "gelu": ('  ROOT %act = f32[{m},{n}] custom-call(%biased), custom_call_target="gelu"', None),
    "gelu_tanh": ('  ROOT %act = f32[{m},{n}] custom-call(%biased), custom_call_target="gelu_tanh"', None),
    "tanh": ("  ROOT %act = f32[{m},{n}] tanh(%biased)", np.tanh),
    "sigmoid": ("  ROOT %act = f32[{m},{n}] logistic(%biased)", lambda v: 1 / (1 + np.exp(-v))),
    "none": ("  ROOT %act = f32[{m},{n}] copy(%biased)", lambda v: v),
}


def gelu(v: np.ndarray, approximate: bool = False) -> np.ndarray:
    import torch

    t = torch.from_numpy(v.astype(np.float32))
    return torch.nn.functional.gelu(t, approximate="tanh" if approximate else "none").numpy()


def act_fn(name: str):
    if name == "gelu":
        return gelu
    if name == "gelu_tanh":
        return lambda v: gelu(v, True)
    return ACT_EPILOGUES[name][1]


def layer_computation(name: str, m: int, k: int, n: int, act: str, dtype: str) -> str:
    """A kOutput fused computation: act(dot(p0, p1^T) + broadcast(p2)), PyTorch Linear layout.
    Instruction names get the suffix `.name` (names are unique per module)."""
    body = ACT_EPILOGUES[act][0].format(m=m, n=n)
    x, w = shape(dtype, (m, k)), shape(dtype, (n, k))
    text = f"""%{name} (p0: {x}, p1: {w}, p2: f32[{n}]) -> f32[{m},{n}] {{
  %p0 = {x} parameter(0)
  %p1 = {w} parameter(1)
  %p2 = f32[{n}] parameter(2)
  %d = f32[{m},{n}] dot(%p0, %p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  %bias = f32[{m},{n}] broadcast(%p2), dimensions={{1}}
  %biased = f32[{m},{n}] add(%d, %bias)
{body}
}}
"""
    head, rest = text.split("\n", 1)
    return head + "\n" + re.sub(r"%(\w+)", rf"%\1.{name}", rest)


def mlp_text(sizes: tuple[int, ...], batch: int, act: str = "relu", dtype: str = "f32") -> str:
    """Linear layers as kOutput fusions (act between layers, none after the last); weights and biases
    are constants w{i}, b{i}. With dtype bf16 the input is converted (auto-cast) and weights are bf16."""
    comps, lines = [], []
    h = "%x"
    if dtype == "bf16":
        lines.append(f"  %xc = bf16[{batch},{sizes[0]}] convert(%x)")
        h = "%xc"
    for i, (k, n) in enumerate(zip(sizes, sizes[1:], strict=False)):
        last = i == len(sizes) - 2
        comps.append(layer_computation(f"layer{i}", batch, k, n, "none" if last else act, dtype))
        lines.append(f'  %w{i} = {shape(dtype, (n, k))} constant({{...}}), data="w{i}"')
        lines.append(f'  %b{i} = f32[{n}] constant({{...}}), data="b{i}"')
        lines.append(f"  %h{i} = f32[{batch},{n}] fusion({h}, %w{i}, %b{i}), kind=kOutput, calls=%layer{i}")
        h = f"%h{i}"
        if dtype == "bf16" and not last:
            lines.append(f"  %h{i}c = bf16[{batch},{n}] convert({h})")
            h = f"%h{i}c"
    lines[-1] = lines[-1].replace(f"  {h} =", f"  ROOT {h} =", 1)
    entry = (f"ENTRY %main (x: f32[{batch},{sizes[0]}]) -> f32[{batch},{sizes[-1]}] {{\n"
             f"  %x = f32[{batch},{sizes[0]}] parameter(0)\n" + "\n".join(lines) + "\n}\n")
    return "HloModule mlp\n\n" + "\n".join(comps) + "\n" + entry


def mlp_weights(sizes: tuple[int, ...], dtype: str = "f32", seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    consts = {}
    for i, (k, n) in enumerate(zip(sizes, sizes[1:], strict=False)):
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        consts[f"w{i}"] = w.astype(BF16) if dtype == "bf16" else w
        consts[f"b{i}"] = rng.standard_normal(n).astype(np.float32)
    return consts


def mlp_reference(x: np.ndarray, consts: dict[str, np.ndarray], layers: int, act: str,
                  dtype: str = "f32") -> np.ndarray:
    h = x.astype(np.float32)
    for i in range(layers):
        w = consts[f"w{i}"].astype(np.float32)
        if dtype == "bf16":
            h = bf16_round(h)
        h = h @ w.T + consts[f"b{i}"]
        if i < layers - 1:
            h = act_fn(act)(h)
    return h


REDUCERS = """%max_f32 (rma: f32[], rmb: f32[]) -> f32[] {
  %rma = f32[] parameter(0)
  %rmb = f32[] parameter(1)
  ROOT %rmx = f32[] maximum(%rma, %rmb)
}

%min_f32 (rna: f32[], rnb: f32[]) -> f32[] {
  %rna = f32[] parameter(0)
  %rnb = f32[] parameter(1)
  ROOT %rmn = f32[] minimum(%rna, %rnb)
}

%add_f32 (rsa: f32[], rsb: f32[]) -> f32[] {
  %rsa = f32[] parameter(0)
  %rsb = f32[] parameter(1)
  ROOT %rsm = f32[] add(%rsa, %rsb)
}
"""


def body_module(params: list[tuple[str, str]], body: str, root: str, fused: str | None = None) -> str:
    """A module computing `body` (HLO lines over the named params, last line defines the result `root`
    shape) in the entry, or, with `fused` = a fusion kind, inside one fusion the entry calls."""
    sig = ", ".join(f"{n}: {s}" for n, s in params)
    lines = [line for line in body.strip().splitlines()]
    lines[-1] = "  ROOT " + lines[-1].strip()
    decls = [f"  %{n} = {s} parameter({i})" for i, (n, s) in enumerate(params)]
    if fused is None:
        return f"HloModule m\n\n{REDUCERS}\nENTRY %main ({sig}) -> {root} {{\n" + "\n".join(decls + lines) + "\n}\n"
    args = ", ".join(f"%x{i}" for i in range(len(params)))
    entry_decls = [f"  %x{i} = {s} parameter({i})" for i, (_, s) in enumerate(params)]
    xsig = ", ".join(f"x{i}: {s}" for i, (_, s) in enumerate(params))
    return (f"HloModule m\n\n{REDUCERS}\n%fused ({sig}) -> {root} {{\n" + "\n".join(decls + lines) + "\n}\n\n"
            f"ENTRY %main ({xsig}) -> {root} {{\n" + "\n".join(entry_decls)
            + f"\n  ROOT %f = {root} fusion({args}), kind={fused}, calls=%fused\n}}\n")
