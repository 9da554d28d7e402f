"""Write the HLO text that XLA itself produces for a GPT-2-shaped stack of transformer blocks (jax).

    .venv/bin/python benchmarks/jax_gpt2_hlo.py -o /tmp/gpt2_jax.hlo [--layers 12] [--seq 128]

The function is written as jax users write it (pre-LayerNorm blocks, causal softmax attention, tanh-GELU
MLP); the weights are parameters, so the file is small and its compile is the compiler's work alone.
`neuronc compile /tmp/gpt2_jax.hlo -o g.neff` then compiles it; a second run of the same command is a cache
hit, the input for the whole-process second-compile figure of docs/speed.md (timed with farm-bench).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

D, HEADS, FF = 768, 12, 3072


def _layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g + b


def _block(x, w):
    seq = x.shape[0]
    h = _layer_norm(x, w["ln1_g"], w["ln1_b"])
    q, k, v = jnp.split(h @ w["qkv"] + w["qkv_b"], 3, axis=-1)
    split = lambda t: t.reshape(seq, HEADS, D // HEADS).transpose(1, 0, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(D // HEADS)
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    scores = jnp.where(causal, scores, -1e9)
    attn = jax.nn.softmax(scores, axis=-1) @ v
    x = x + attn.transpose(1, 0, 2).reshape(seq, D) @ w["proj"] + w["proj_b"]
    h = _layer_norm(x, w["ln2_g"], w["ln2_b"])
    h = jax.nn.gelu(h @ w["fc"] + w["fc_b"], approximate=True)
    return x + h @ w["out"] + w["out_b"]


def _weights(layers: int) -> list[dict[str, jax.ShapeDtypeStruct]]:
    shapes = {"ln1_g": (D,), "ln1_b": (D,), "qkv": (D, 3 * D), "qkv_b": (3 * D,), "proj": (D, D),
              "proj_b": (D,), "ln2_g": (D,), "ln2_b": (D,), "fc": (D, FF), "fc_b": (FF,), "out": (FF, D),
              "out_b": (D,)}
    return [{k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()} for _ in range(layers)]


def hlo_text(layers: int, seq: int) -> str:
    def model(x, weights):
        for w in weights:
            x = _block(x, w)
        return x

    x = jax.ShapeDtypeStruct((seq, D), jnp.float32)
    return jax.jit(model).lower(x, _weights(layers)).compiler_ir("hlo").as_hlo_text()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    text = hlo_text(args.layers, args.seq)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.output}: {text.count(chr(10))} lines of XLA's HLO ({args.layers} layers, seq {args.seq})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
