"""Helpers of the real-model tests: load an example of examples/ and compare a compiled call with eager."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HF_EXAMPLES = ("gpt2", "bert", "llama", "t5_encoder", "vit", "resnet50", "convnext")
# max abs error / max abs reference, per output (the bounds: fp32, and --auto-cast matmult)
BOUNDS = {"none": 1e-4, "matmult": 3e-2}


def example(name: str, **kwargs: Any) -> tuple[torch.nn.Module, tuple, dict]:
    """examples/<name>.py's get_model(**kwargs) as (model, args, kwargs); skipped without transformers."""
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location(f"neuronc_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    result = module.get_model(**kwargs)
    return result[0], tuple(result[1]), dict(result[2]) if len(result) > 2 else {}


def tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def rel_errors(got: Any, want: Any) -> list[float]:
    """Per output tensor: max abs error / max abs reference (same structure and dtypes required)."""
    g, w = tensors(got), tensors(want)
    assert len(g) == len(w), f"{len(g)} outputs, eager gives {len(w)}"
    errors = []
    for a, b in zip(g, w, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        a, b = a.double().numpy(), b.double().numpy()
        errors.append(float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) or 1.0)))
    return errors
