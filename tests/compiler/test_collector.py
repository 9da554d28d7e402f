"""Python's garbage collector around a compile: paused while it runs and restored after; the interpreter's last
full collection at exit skipped once a process has compiled (compiler/driver.py)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

import compiler
from compiler import driver

ROOT = Path(__file__).resolve().parents[2]

NEGATE = """\
HloModule negate

ENTRY %main (x: f32[8,16]) -> f32[8,16] {
  %x = f32[8,16]{1,0} parameter(0)
  ROOT %n = f32[8,16]{1,0} negate(f32[8,16]{1,0} %x)
}
"""


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_during_a_compile_and_restored_after(enabled, monkeypatch):
    seen = []
    real = driver._compile_options
    monkeypatch.setattr(driver, "_compile_options", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        compiler.compile(NEGATE, cache=False)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False]


def test_collector_paused_restores_the_state_on_an_error():
    assert gc.isenabled()
    with pytest.raises(ValueError), driver.collector_paused():
        assert not gc.isenabled()
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_process_that_compiled_freezes_its_objects_at_exit():
    """The hook runs before the interpreter's final collection: a handler registered before the first compile
    runs after it (atexit is last in, first out) and sees the collector off and the objects frozen."""
    code = "\n".join([
        "import atexit, gc",
        "atexit.register(lambda: print('exit', gc.isenabled(), gc.get_freeze_count() > 0))",
        "import compiler",
        f"text = {NEGATE!r}",
        "compiler.compile(text, cache=False)",
        "compiler.compile(text, cache=False)",
        "print('compiled', gc.isenabled(), gc.get_freeze_count())",
    ])
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["compiled True 0", "exit False True"]
