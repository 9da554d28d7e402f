"""Every dump of every test model parses back to identical text, verifies, and computes what the model
computes: the frontend's test models (transformer block, attention, embedding, ...) and the bundled MLP, run
through the -O2 pipeline with a dump after every pass."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import frontend
from compiler.options import CompileOptions
from compiler.pipeline import build_pipeline
from hlo.interpreter import evaluate
from hlo.io import load_hlo_file
from hlo.printer import print_module
from hlo.verifier import verify_module
from tests.frontend.test_ops import MODELS, _inputs

EXAMPLES = Path(__file__).parents[2] / "examples"


@functools.cache
def _model(name: str) -> tuple[torch.nn.Module, tuple]:
    if name == "mlp":
        spec = importlib.util.spec_from_file_location("mlp_example", EXAMPLES / "mlp.py")
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        model, inputs = example.get_model()
        return model, (inputs[0][:8],)
    return _inputs(name)


@pytest.mark.parametrize("auto_cast", ["none", pytest.param("all", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["mlp", *MODELS])
def test_every_dump_parses_back_and_computes_the_same(name, auto_cast, tmp_path):
    model, inputs = _model(name)
    module = frontend.import_model(model, inputs, capture="fx")
    args = [t.numpy() for t in inputs]
    expected = evaluate(module, args)
    build_pipeline(2, CompileOptions(dump_dir=tmp_path, dump_pass_re=".*", auto_cast=auto_cast,
                                      verify_each=True)).run(module)
    dumps = sorted(tmp_path.glob("*.hlo"))
    assert len(dumps) >= 7
    for path in dumps:
        loaded = load_hlo_file(path)
        assert print_module(loaded) == path.read_text(), path.name
        verify_module(loaded)
        results = evaluate(loaded, args)
        if path.name.endswith("after_auto_cast.hlo"):  # lower precision on purpose: the new reference
            expected = results
        tol = 1e-4 if auto_cast == "none" else 1e-2
        for got, want in zip(results, expected, strict=True):
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                                       err_msg=path.name)
