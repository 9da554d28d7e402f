"""torch.compile(model, backend="neuronc"): registration, emulator runs, fallbacks to eager, options."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import compiler.driver
from compiler.dynamo import NeuroncFallbackWarning
from tests.conftest import assert_close

HERE = "tests/frontend/test_dynamo.py"


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))), x.sum(-1)


class Breaks(nn.Module):
    """A graph break (print) between a supported graph and one with an unsupported operator."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.tanh(self.fc(x))
        print("graph break", end="")
        return torch.cummax(y, 0).values  # CUMMAX


@pytest.fixture
def emulator_runs(monkeypatch):
    """Counts Executable.run calls (each is one graph run on the emulator)."""
    calls = []
    run = compiler.driver.Executable.run

    def counting(self, *inputs, **kwargs):
        calls.append(self)
        return run(self, *inputs, **kwargs)

    monkeypatch.setattr(compiler.driver.Executable, "run", counting)
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()


def _fallbacks(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, NeuroncFallbackWarning)]


def test_backend_is_registered_by_name():
    assert "neuronc" in torch._dynamo.list_backends()


def test_graph_runs_on_the_emulator_and_returns_torch_tensors(emulator_runs):
    torch.manual_seed(0)
    model, x = TwoLayer().eval(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="neuronc")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NeuroncFallbackWarning)
        out, total = compiled(x)
        again, _ = compiled(x * 2)
        expected, expected_total = model(x)
    assert not _fallbacks(caught)
    assert len(emulator_runs) == 2 and emulator_runs[0] is emulator_runs[1]  # compiled once, run twice
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (4, 8)
    assert_close(out.numpy(), expected)
    assert_close(total.numpy(), expected_total)
    assert_close(again.numpy(), model(x * 2)[0].detach())


def test_unsupported_graph_falls_back_with_ops_and_lines(emulator_runs, capsys):
    torch.manual_seed(0)
    model, x = Breaks().eval(), torch.randn(5, 8)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NeuroncFallbackWarning)
        out = torch.compile(model, backend="neuronc")(x)
        expected = model(x)
    (message,) = _fallbacks(caught)
    assert "unsupported PyTorch operators: torch.cummax" in message
    assert f"{HERE}:{_line('CUMMAX')}" in message
    assert len(emulator_runs) == 1  # the first graph (linear + tanh) still ran on the emulator
    assert_close(out.numpy(), expected)


def test_autograd_falls_back_to_eager(emulator_runs):
    model, x = TwoLayer(), torch.randn(2, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NeuroncFallbackWarning)
        out, _ = torch.compile(model, backend="neuronc")(x)
    assert any("torch.no_grad()" in m for m in _fallbacks(caught))
    assert out.requires_grad and not emulator_runs
    out.sum().backward()
    assert model.fc1.weight.grad is not None


def test_dynamic_shapes_are_specialized_per_call(emulator_runs):
    torch.manual_seed(0)
    model = TwoLayer().eval()
    compiled = torch.compile(model, backend="neuronc", dynamic=True)
    with torch.no_grad():
        for batch in (3, 5, 3):
            x = torch.randn(batch, 16)
            assert_close(compiled(x)[0].numpy(), model(x)[0])
    assert len(emulator_runs) == 3 and len({id(e) for e in emulator_runs}) == 2


def test_options_reach_the_compiler(emulator_runs):
    torch.manual_seed(0)
    model, x = TwoLayer().eval(), torch.randn(4, 16)
    with torch.no_grad():
        out, _ = torch.compile(model, backend="neuronc", options={"target": "trn2", "opt_level": 0})(x)
        assert_close(out.numpy(), model(x)[0])
    assert emulator_runs[0].target == "trn2"


def test_weights_are_constants_and_a_changed_weight_recompiles(emulator_runs):
    torch.manual_seed(0)
    model, x = TwoLayer().eval(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="neuronc")
    with torch.no_grad():
        compiled(x)
        executable = emulator_runs[0]
        assert len(executable.input_specs()) == 1  # x only: the weights are compiled in
        assert 'data="fc1.weight"' in executable.hlo and 'data="fc2.bias"' in executable.hlo
        model.fc1.weight.mul_(2)  # an update in place: the same tensor, a new version
        out, _ = compiled(x)
        assert_close(out.numpy(), model(x)[0])
        compiled(x)
    assert len(emulator_runs) == 3 and len({id(e) for e in emulator_runs}) == 2


def test_bf16_model_returns_bf16(emulator_runs):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).to(torch.bfloat16).eval()
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        out = torch.compile(model, backend="neuronc")(x)
        expected = model(x)
    assert out.dtype == torch.bfloat16 and len(emulator_runs) == 1
    assert_close(out.float().numpy(), expected, kind="bf16")


def test_inference_mode_and_inference_tensor_weights(emulator_runs):
    with torch.inference_mode():
        model, x = TwoLayer().eval(), torch.randn(4, 16)  # weights without version counters
        out, _ = torch.compile(model, backend="neuronc")(x)
        assert_close(out.numpy(), model(x)[0])
    assert len(emulator_runs) == 1


def test_misspelt_option_is_an_error():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown neuronc option.*opt_levle"), torch.no_grad():
        torch.compile(TwoLayer().eval(), backend="neuronc", options={"opt_levle": 1})(torch.randn(2, 16))
