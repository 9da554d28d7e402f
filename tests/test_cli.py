"""The neuronc command line, end to end, through compiler.cli.main (and once as a real process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mlp.py"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli")
    neff, dump = out / "mlp.neff", out / "dump"
    assert main(["compile", str(EXAMPLE), "-o", str(neff), "--dump-dir", str(dump)]) == 0
    return out, neff, dump


def test_compile_writes_every_dump(compiled):
    _, neff, dump = compiled
    assert neff.stat().st_size > 0
    names = sorted(p.name for p in dump.iterdir())
    assert any(n.endswith(".0000.before_optimizations.hlo") for n in names)
    assert any(".after_" in n for n in names)
    for required in ("fusion_decisions.txt", "memory_plan.txt", "schedule.txt", "program.s"):
        assert required in names, required


def test_every_hlo_dump_compiles_again(compiled, tmp_path):
    _, _, dump = compiled
    hlos = sorted(dump.glob("*.hlo"))
    assert len(hlos) >= 2
    for i, hlo in enumerate(hlos):
        assert main(["compile", str(hlo), "-o", str(tmp_path / f"{i}.neff")]) == 0, hlo.name


def test_run_random_and_inputs(compiled, tmp_path, capsys):
    _, neff, _ = compiled
    assert main(["run", str(neff), "--random"]) == 0
    assert "out0: float32[64, 10]" in capsys.readouterr().out
    x = np.random.default_rng(1).standard_normal((64, 784)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(neff), "--inputs", str(tmp_path / "x.npy"), "--output", str(tmp_path / "o.npz")]) == 0
    import torch

    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        from mlp import get_model
    finally:
        sys.path.pop(0)
    model, _ = get_model()
    expected = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out0"], expected, rtol=1e-4, atol=1e-4)


def test_profile_and_trace(compiled, tmp_path, capsys):
    _, neff, _ = compiled
    trace, figures = tmp_path / "t.json", tmp_path / "p.json"
    assert main(["profile", str(neff), "--trace", str(trace), "--json", str(figures)]) == 0
    assert "MFU" in capsys.readouterr().out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    assert json.loads(figures.read_text())["time_us"] > 0


def test_disasm_asm_round_trip(compiled, tmp_path):
    _, neff, _ = compiled
    asm = tmp_path / "prog.s"
    assert main(["disasm", str(neff), "-o", str(asm)]) == 0
    assert main(["asm", str(asm), "-o", str(tmp_path / "again.neff")]) == 0
    again = tmp_path / "again" / "prog.s"  # same name: the text names its constants side file
    again.parent.mkdir()
    assert main(["disasm", str(tmp_path / "again.neff"), "-o", str(again)]) == 0
    assert again.read_text() == asm.read_text()


@pytest.mark.parametrize("source, message", [
    ("import torch\n", "defines no function get_model"),
    ("def get_model():\n    raise RuntimeError('boom')\n", "get_model() raised RuntimeError: boom"),
    ("raise ValueError('at import')\n", "importing it raised ValueError"),
])
def test_bad_model_files(tmp_path, capsys, source, message):
    model = tmp_path / "m.py"
    model.write_text(source)
    assert main(["compile", str(model), "-o", str(tmp_path / "m.neff")]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "m.neff").exists()


def test_missing_and_foreign_files(tmp_path, capsys):
    assert main(["compile", str(tmp_path / "nope.py")]) != 0
    assert "no such file" in capsys.readouterr().err
    foreign = tmp_path / "x.neff"
    foreign.write_bytes(b"PK\x03\x04 not a neff at all")
    assert main(["run", str(foreign)]) != 0
    assert "error" in capsys.readouterr().err


def test_list_operators(capsys):
    assert main(["list-operators"]) == 0
    captured = capsys.readouterr()
    ops = captured.out.split()
    assert any(op.startswith("aten.addmm") for op in ops) and any(op.startswith("aten.relu") for op in ops)
    assert f"({len(ops)} operators)" in captured.err


def test_console_script_runs(tmp_path):
    exe = Path(sys.executable).parent / "neuronc"
    result = subprocess.run([str(exe), "compile", str(tmp_path / "missing.py")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "no such file" in result.stderr and "Traceback" not in result.stderr
