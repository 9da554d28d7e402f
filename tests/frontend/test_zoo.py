"""The model zoo (zoo.py) through all three capture paths, against eager torch.

export and fx: the HLO reference interpreter's result matches eager torch, and the caller's model keeps
its training flags. torch.compile(backend="neuronc"): the result matches eager torch; for the models
whose graphs the backend compiles today (zoo.EMULATED) every graph runs on the emulator, the others
may fall back to eager graph by graph (with a NeuroncFallbackWarning).
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch.utils._pytree import tree_leaves

import frontend
from compiler.dynamo import NeuroncFallbackWarning
from hlo.interpreter import evaluate
from tests.conftest import assert_close
from tests.frontend.zoo import COMPILE_OPTIONS, EMULATED, ZOO


@functools.cache
def _model(name: str) -> tuple[torch.nn.Module, tuple, list[torch.Tensor]]:
    torch.manual_seed(0)
    model, inputs = ZOO[name]()
    with torch.no_grad():
        expected = tree_leaves(model(*inputs))
    return model, inputs, expected


def _check(actual: list, expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert tuple(a.shape) == tuple(e.shape)
        assert_close(a.numpy() if isinstance(a, torch.Tensor) else a, e)


@pytest.mark.parametrize("capture", ["export", "fx"])
@pytest.mark.parametrize("name", list(ZOO))
def test_capture_matches_torch(name: str, capture: str):
    model, inputs, expected = _model(name)
    model.train()  # the capture must run it in eval mode and give the flag back
    try:
        module = frontend.import_model(model, inputs, capture=capture)
        assert model.training and all(m.training for m in model.modules())
    finally:
        model.eval()
    _check(evaluate(module, [t.numpy() for t in inputs]), expected)


@pytest.mark.parametrize("name", list(ZOO))
def test_torch_compile_matches_torch(name: str):
    model, inputs, expected = _model(name)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="neuronc", dynamic=False, options=COMPILE_OPTIONS.get(name))
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always", NeuroncFallbackWarning)
        actual = tree_leaves(compiled(*inputs))
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, NeuroncFallbackWarning)]
    if name in EMULATED:
        assert not fallbacks, fallbacks
    _check(actual, expected)


@pytest.mark.parametrize("capture", ["export", "fx"])
def test_mlp_compiles_and_runs_on_the_emulator(capture: str):
    import compiler

    model, inputs, expected = _model("mlp")
    executable = compiler.compile(model, inputs, capture=capture)
    _check(executable.run(*inputs), expected)
