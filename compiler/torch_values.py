"""Torch's side of an Executable's calls: results as torch tensors, the calling convention as JSON.

Loaded on first use (compiler.lazy): a program run on numpy inputs, or a cache hit of an HLO file, never
imports torch.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from frontend.builder import HLO_TO_TORCH
from frontend.signature import Signature
from isa.dtypes import dtype as isa_dtype

log = logging.getLogger("neuronc")

_JSON_LEAVES = (type(None), bool, int, float, str)


def signature_to_json(signature: Signature) -> str | None:
    """The calling convention as JSON (kept in a saved .neff and a compile cache entry; no pickle), or None
    when it holds something JSON cannot (a pytree node type registered without a serialized name, a
    non-tensor argument that is not a plain value)."""
    if not all(type(v) in _JSON_LEAVES for v in signature.constants.values()):
        return None
    try:
        specs = [None if s is None else pytree.treespec_dumps(s) for s in (signature.in_spec, signature.out_spec)]
    except Exception:  # torch raises several types for a node type it cannot serialize
        return None
    return json.dumps({"in_spec": specs[0], "out_spec": specs[1], "fed": signature.fed,
                       "constants": [[i, v] for i, v in signature.constants.items()], "names": signature.names,
                       "in_types": signature.in_types, "out_types": signature.out_types})


def signature_from_json(text: str) -> Signature | None:
    """The Signature that ``signature_to_json`` wrote; None (with a log line) when it cannot be rebuilt here,
    e.g. the model's output class is not imported in this process (then calls take the flat inputs)."""
    try:
        data = json.loads(text)
        specs = [None if s is None else pytree.treespec_loads(s) for s in (data["in_spec"], data["out_spec"])]
        return Signature(specs[0], [int(i) for i in data["fed"]], {int(i): v for i, v in data["constants"]},
                         [str(n) for n in data["names"]], specs[1], [str(t) for t in data["in_types"]],
                         [str(t) for t in data["out_types"]])
    except Exception as e:  # a type unknown here, or a damaged entry
        log.info("neuronc: the stored calling convention cannot be rebuilt (%s: %s)", type(e).__name__, e)
        return None


def result_to_torch(array: np.ndarray, hlo_type: str) -> torch.Tensor:
    """A result as a torch tensor of torch's dtype for its HLO type."""
    return to_torch(array, HLO_TO_TORCH.get(hlo_type))


def to_torch(array: np.ndarray, dtype: torch.dtype | None) -> torch.Tensor:
    """A numpy array as a torch tensor of ``dtype`` (None: its own); bf16 and fp8 keep their bits."""
    array = np.ascontiguousarray(array).reshape(array.shape)  # (ascontiguousarray makes a 0-d array 1-d)
    if dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        ints = np.int16 if dtype == torch.bfloat16 else np.uint8
        return torch.from_numpy(array.view(ints).copy()).view(dtype)
    tensor = torch.from_numpy(array.copy())
    return tensor.to(dtype) if dtype is not None and tensor.dtype != dtype else tensor


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor as a numpy array (bf16 tensors keep their dtype)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(isa_dtype("bf16").numpy)
    return tensor.numpy()


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)
