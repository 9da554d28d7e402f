"""The frontend's promised errors: unsupported operators listed once, lowering and capture failures."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import frontend
from compiler.errors import LoweringError, UnsupportedOpError
from frontend.lowering import LOWERINGS

HERE = "tests/frontend/test_errors.py"


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.cummax(self.fc(x), 0).values  # CUMMAX
        z = torch.cummax(y, 1).values.cummin(dim=-1).values  # CUMMIN
        return z + torch.relu(y)


class Dropout(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)  # SDPA


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


class DataDependent(nn.Module):
    def forward(self, x):
        return x / x.abs().max().item() * x.shape[0]


class InPlace(nn.Module):
    def forward(self, x):
        y = F.relu(x, inplace=True)
        return y + x


def test_unsupported_ops_are_listed_once_export():
    with pytest.raises(UnsupportedOpError) as info:
        frontend.import_model(Unsupported(), (torch.randn(4, 8),))
    msg = str(info.value)
    assert msg == (
        f"unsupported PyTorch operators: aten.cummax.default (node %cummax at {HERE}:{_line('CUMMAX')}, "
        f"and 1 more), aten.cummin.default (node %cummin at {HERE}:{_line('CUMMIN')}); "
        "run `neuronc list-operators` for the supported list")


def test_unsupported_ops_are_listed_once_fx():
    with pytest.raises(UnsupportedOpError) as info:
        frontend.import_model(Unsupported(), (torch.randn(4, 8),), capture="fx")
    msg = str(info.value)
    assert msg.startswith(f"unsupported PyTorch operators: torch.cummax (node %cummax at {HERE}:{_line('CUMMAX')}, "
                          "and 1 more), Tensor.cummin (node %cummin at ")
    assert "nn.Linear" not in msg and "relu" not in msg


def test_rule_rejecting_an_argument_names_op_node_and_line():
    with pytest.raises(LoweringError) as info:
        frontend.import_model(Dropout(), (torch.randn(1, 2, 4, 8),))
    msg = str(info.value)
    assert msg.startswith("aten.scaled_dot_product_attention.default (node %scaled_dot_product_attention "
                          f"at {HERE}:{_line('SDPA')}): dropout_p=0.5 is not supported")


def test_export_failure_is_a_lowering_error():
    with pytest.raises(LoweringError, match=r"^torch\.export failed for Branchy: ") as info:
        frontend.import_model(Branchy(), (torch.randn(3),))
    assert "Traceback" not in str(info.value) and len(str(info.value).splitlines()) <= 4  # 3 of torch + our hint


def test_symbolic_trace_failure_is_a_lowering_error():
    with pytest.raises(LoweringError, match=r"^torch\.fx\.symbolic_trace failed for Branchy: "):
        frontend.import_model(Branchy(), (torch.randn(3),), capture="fx")


def test_in_place_op_whose_input_is_reused_is_refused():
    with pytest.raises(LoweringError, match="in-place relu on %x"):
        frontend.import_model(InPlace(), (torch.randn(3),), capture="fx")


def test_value_read_from_tensor_data_is_not_baked_in():
    with pytest.raises(UnsupportedOpError, match=r"^unsupported PyTorch operators: Tensor\.item "):
        frontend.import_model(DataDependent(), (torch.randn(3),), capture="fx")


def test_unknown_capture_mode():
    with pytest.raises(LoweringError, match="capture must be"):
        frontend.import_model(nn.ReLU(), (torch.randn(3),), capture="jit")


def test_supported_operators_lists_the_table():
    ops = frontend.supported_operators()
    assert ops == sorted(LOWERINGS) and len(set(ops)) == len(ops)
    assert all(re.fullmatch(r"aten\.\w+\.\w+", op) for op in ops)
    assert {"aten.linear.default", "aten.addmm.default", "aten.relu.default", "aten.gelu.default",
            "aten.tanh.default", "aten.sigmoid.default", "aten.view.default", "aten.permute.default",
            "aten.softmax.int", "aten.layer_norm.default"} <= set(ops)
    for op in ops:  # every key names a real ATen overload
        namespace, packet, overload = op.split(".")
        assert getattr(getattr(torch.ops.aten, packet), overload) is not None


class MutatesInput(nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


class MutatesView(nn.Module):
    def forward(self, x):
        y = x * 2
        y[0].zero_()
        return y


def test_in_place_method_on_an_input_is_refused():
    with pytest.raises(LoweringError, match=r"in-place add_ on input %x is not supported"):
        frontend.import_model(MutatesInput(), (torch.randn(3),), capture="fx")


def test_in_place_method_on_a_view_is_refused():
    with pytest.raises(LoweringError, match=r"in-place zero_ on %getitem, a view of another tensor"):
        frontend.import_model(MutatesView(), (torch.randn(2, 3),), capture="fx")


def test_capture_is_quiet():
    """torch 2.13's own FutureWarning about LeafSpec (raised while export copies pytree specs) is silenced."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frontend.import_model(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(2, 4),))
    assert not [w for w in caught if "LeafSpec" in str(w.message)]


class WritesIntoConstant(nn.Module):
    def forward(self, x):
        z = torch.zeros(3)
        z[0] = x.sum()
        return z


def test_write_into_a_constant_tensor_is_refused():
    with pytest.raises(LoweringError, match=r"__setitem__ writes traced values into a tensor made from constants"):
        frontend.import_model(WritesIntoConstant(), (torch.randn(3),), capture="fx")
