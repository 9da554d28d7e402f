"""What a process loads: a compile-cache hit of an HLO file needs neither torch nor the backend, and the
modules that load on first use (compiler.lazy) behave as imported ones once used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backend.registry import SCHEDULER_NAMES, SCHEDULERS, Registry, StrategyError
from backend.schedule import list_schedule  # noqa: F401 - registers the built-in schedulers
from compiler.executable import _is_array, to_numpy
from compiler.lazy import lazy_import

ROOT = Path(__file__).resolve().parents[2]
HLO = """HloModule add_mul
ENTRY main {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  s = f32[4,8] add(x, y)
  ROOT m = f32[4,8] multiply(s, y)
}
"""
# run the CLI, then report which heavy modules the process imported
PROBE = ("import json, sys; from compiler.cli import main; code = main(sys.argv[1:]); "
         "heavy = ('torch', 'backend.api', 'compiler.pipeline', 'frontend', 'isa.emulator'); "
         "print(json.dumps({'code': code, 'loaded': [m for m in heavy if m in sys.modules]}))")


def _cli(args: list[str], tmp_path: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEURONC_CACHE_DIR": str(tmp_path / "cache"),
           "NEURONC_CACHE_VERSION": f"lazy-{os.getpid()}-{tmp_path.name}"}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_cache_hit_of_an_hlo_file_imports_neither_torch_nor_the_backend(tmp_path):
    (tmp_path / "m.hlo").write_text(HLO)
    first, err = _cli(["compile", "m.hlo", "-o", "a.neff"], tmp_path)
    assert first["code"] == 0 and "backend.api" in first["loaded"] and "cache hit" not in err
    second, err = _cli(["compile", "m.hlo", "-o", "b.neff"], tmp_path)
    assert second == {"code": 0, "loaded": []}
    assert "compile cache hit" in err
    assert (tmp_path / "a.neff").read_bytes() == (tmp_path / "b.neff").read_bytes()
    # the .neff written by the hit runs (this loads the emulator, and still not torch)
    ran, _ = _cli(["run", "b.neff", "--checks", "off", "--quiet"], tmp_path)
    assert ran["code"] == 0 and "isa.emulator" in ran["loaded"] and "torch" not in ran["loaded"]


def test_lazy_import_runs_the_module_on_first_use():
    name = "tests.compiler._lazy_probe"
    sys.modules.pop(name, None)
    module = lazy_import(name)
    assert name not in sys.modules and "not imported yet" in repr(module)
    assert module.VALUE == 42 and module.square(3) == 9  # imported on the first attribute access
    assert name in sys.modules and lazy_import(name) is sys.modules[name]


def test_lazy_import_of_a_missing_module_says_which():
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        lazy_import("compiler.no_such_module_here")


def test_a_registry_names_its_built_ins_before_loading_them():
    registry: Registry[str] = Registry("widget", "widget", builtins=("tests.compiler._lazy_probe", ("a", "b")))
    assert registry.names() == ["a", "b"] and "a" in registry and "c" not in registry
    with pytest.raises(StrategyError, match="unknown widget 'c'"):
        registry.get("c")  # loads the module that registers the built-ins, then refuses


def test_the_built_in_schedulers_are_those_backend_schedule_registers():
    assert [n for n in SCHEDULERS.names() if SCHEDULERS.origin(n) == "built-in"] == list(SCHEDULER_NAMES)


def test_numpy_inputs_never_need_torch():
    array = np.arange(4, dtype=np.float32)
    assert _is_array(array) and to_numpy(array) is array and to_numpy(1.5).dtype == np.float64


def test_running_a_torch_models_neff_needs_no_torch(tmp_path):
    """`neuronc run` and `profile` feed the program its own inputs: the calling convention stored in the .neff
    (torch pytree specs) is rebuilt only when a caller passes the model's arguments."""
    import torch  # noqa: PLC0415 - this test's own model; the probed processes must not import it

    import compiler  # noqa: PLC0415
    from compiler.driver import load  # noqa: PLC0415

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    compiler.compile(model, (x,), cache=False, quiet=True).save(tmp_path / "m.neff")
    np.save(tmp_path / "x.npy", x.numpy())
    for command in ("run", "profile"):
        ran, _ = _cli([command, "m.neff", "--inputs", "x.npy", "--checks", "off", "--quiet"], tmp_path)
        assert ran["code"] == 0 and "isa.emulator" in ran["loaded"] and "torch" not in ran["loaded"]
    loaded = load(tmp_path / "m.neff")
    assert loaded.signature is not None and loaded.signature.in_spec is not None  # rebuilt when asked for
    with torch.no_grad():
        np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    outputs, profile = loaded.run_program_inputs([x.numpy()])
    np.testing.assert_array_equal(outputs[0], loaded.run(x.numpy())[0])
    assert profile.time_us > 0
