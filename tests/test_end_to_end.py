"""PyTorch MLPs through every layer, emulated, against eager torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler
from tests.conftest import MLP, assert_close

MLP_SHAPES = [  # batch, in, hidden, out
    (3, 100, 300, 10),
    (64, 256, 1024, 512),
    (200, 784, 300, 10),
]


@pytest.mark.parametrize("auto_cast", ["none", "matmult"])
@pytest.mark.parametrize("shape", MLP_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mlp_matches_torch(shape, auto_cast):
    batch, n_in, hidden, n_out = shape
    model = MLP((n_in, hidden, n_out)).eval()
    x = torch.randn(batch, n_in)
    exe = compiler.compile(model, (x,), auto_cast=auto_cast)
    (out,) = exe.run(x, check=True)
    assert_close(out, model(x), "f32" if auto_cast == "none" else "bf16")


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "tanh", "sigmoid"])
def test_activations(act):
    model = MLP((40, 130, 20), act=act).eval()
    x = torch.randn(5, 40)
    (out,) = compiler.compile(model, (x,)).run(x, check=True)
    assert_close(out, model(x))


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_every_opt_level(opt_level):
    model = MLP((33, 65, 7), bias=opt_level % 2 == 0).eval()
    x = torch.randn(4, 33)
    (out,) = compiler.compile(model, (x,), opt_level=opt_level).run(x, check=True)
    assert_close(out, model(x))


def test_fx_capture_and_trn2():
    model = MLP((50, 60, 70)).eval()
    x = torch.randn(6, 50)
    exe = compiler.compile(model, (x,), target="trn2", capture="fx")
    assert exe.target == "trn2"
    assert_close(exe.run(x, check=True)[0], model(x))


def test_profile_reports_every_figure(tmp_path):
    model = MLP((128, 256, 128)).eval()
    x = torch.randn(64, 128)
    exe = compiler.compile(model, (x,), auto_cast="matmult")
    prof = exe.profile(x)
    assert prof.time_us > 0 and 0 < prof.mfu <= 1
    assert prof.hbm_read_bytes >= 128 * 256 * 2 + 256 * 128 * 2  # the weights at least once, in bf16
    assert prof.hbm_write_bytes >= 64 * 128 * 4
    assert prof.engine_busy["pe"] > 0 and prof.engine_busy["act"] > 0
    assert sum(prof.instruction_counts.values()) == len(exe.program.instructions)
    assert "MFU" in prof.summary()
    prof.save_trace(tmp_path / "t.json")
    assert (tmp_path / "t.json").stat().st_size > 0


def test_save_load_round_trip(tmp_path):
    model = MLP((20, 30, 5)).eval()
    x = torch.randn(2, 20)
    exe = compiler.compile(model, (x,))
    exe.save(tmp_path / "m.neff")
    exe2 = compiler.load(tmp_path / "m.neff")
    assert exe2.asm == exe.asm
    assert exe2.hlo == exe.hlo
    np.testing.assert_array_equal(exe2.run(x)[0], exe.run(x)[0])


def test_hlo_text_compiles():
    model = MLP((10, 20, 3)).eval()
    x = torch.randn(2, 10)
    exe = compiler.compile(model, (x,))
    assert "HloModule" in exe.hlo and "fusion" in exe.hlo
    assert exe.asm.startswith(";") or ".target" in exe.asm


def test_wrong_inputs_are_rejected():
    from isa.errors import InputError

    model = MLP((10, 20, 3)).eval()
    exe = compiler.compile(model, (torch.randn(2, 10),))
    with pytest.raises(InputError, match="takes 1 input"):
        exe.run()
    with pytest.raises(InputError, match="expected shape"):
        exe.run(torch.randn(3, 10))
    with pytest.raises(InputError, match="expected dtype"):
        exe.run(np.zeros((2, 10), np.float64))
