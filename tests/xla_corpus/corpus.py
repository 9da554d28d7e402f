"""Reading the XLA conformance corpus (no jax needed): the cases, their inputs, jax's outputs, the comparison.

A case is ``cases/<name>.hlo`` (as XLA wrote it) and ``cases/<name>.npz`` (``in0, in1, ...`` and jax's
``out0, out1, ...``); ``cases/manifest.json`` gives each case's family. numpy has no bf16/fp8, so such arrays
are stored as their raw bits under ``<key>::<dtype>`` (uint16/uint8) and turned back by ``decode_arrays``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

CASES_DIR = Path(__file__).parent / "cases"
MANIFEST = CASES_DIR / "manifest.json"

_RAW = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
        "float8_e5m2": ml_dtypes.float8_e5m2}
# (rtol, atol) per result type: XLA's CPU math and ours differ in the last bits of transcendentals
TOLERANCE = {"float32": (1e-4, 1e-4), "float64": (1e-6, 1e-6), "float16": (2e-3, 2e-3),
             "bfloat16": (2e-2, 2e-2), "float8_e4m3fn": (0.13, 0.02), "float8_e5m2": (0.26, 0.02)}


def encode_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for key, a in arrays.items():
        name = a.dtype.name
        if name in _RAW:
            out[f"{key}::{name}"] = a.view(np.uint8 if a.dtype.itemsize == 1 else np.uint16)
        else:
            out[key] = a
    return out


def decode_arrays(stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for key, a in stored.items():
        if "::" in key:
            key, name = key.split("::")
            a = a.view(_RAW[name])
        out[key] = a
    return out


@dataclass
class Case:
    name: str
    family: str
    doc: str
    hlo: str
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def case_names() -> list[str]:
    return sorted(json.loads(MANIFEST.read_text()))


def load_case(name: str) -> Case:
    info = json.loads(MANIFEST.read_text())[name]
    with np.load(CASES_DIR / f"{name}.npz", allow_pickle=False) as z:
        arrays = decode_arrays({k: z[k] for k in z.files})
    inputs = [arrays[f"in{i}"] for i in range(sum(k.startswith("in") for k in arrays))]
    outputs = [arrays[f"out{i}"] for i in range(sum(k.startswith("out") for k in arrays))]
    return Case(name, info["family"], info["doc"], (CASES_DIR / f"{name}.hlo").read_text(), inputs, outputs)


def load_all() -> list[Case]:
    return [load_case(n) for n in case_names()]


def mismatch(got: list[np.ndarray], expected: list[np.ndarray]) -> str | None:
    """Why ``got`` differs from jax's ``expected`` (None when it matches): integers and pred exactly, floats
    within the tolerance of their type, NaN where jax has NaN, infinities of the same sign."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, jax gives {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g = np.asarray(g)
        if g.shape != e.shape:
            return f"out{i}: shape {g.shape}, jax gives {e.shape}"
        if g.dtype != e.dtype:
            return f"out{i}: dtype {g.dtype}, jax gives {e.dtype}"
        if e.dtype.kind in "biu":
            bad = g != e
            if bad.any():
                j = tuple(np.argwhere(bad)[0])
                return f"out{i}: {int(bad.sum())} of {e.size} differ, e.g. at {j}: {g[j]!r} vs jax {e[j]!r}"
            continue
        rtol, atol = TOLERANCE[e.dtype.name]
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            j = tuple(np.argwhere(~close)[0])
            return f"out{i}: {int((~close).sum())} of {e.size} differ, e.g. at {j}: {g64[j]!r} vs jax {e64[j]!r}"
    return None
