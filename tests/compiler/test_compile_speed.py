"""Compile cache in use, compile statistics (--time-passes), weights outside the .neff, --checks."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import compiler
from compiler.cache import CompileCache
from compiler.cache_entries import StoredExecutable
from compiler.cli import main
from compiler.stats import Progress
from isa import weights
from tests.conftest import MLP

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp.py"


def _model():
    torch.manual_seed(3)
    return MLP((16, 32, 8)).eval(), (torch.randn(4, 16),)


def test_second_compile_is_a_cache_hit_with_the_same_program():
    model, example = _model()
    first = compiler.compile(model, example)
    assert first.compile_stats.cache.startswith("miss")
    second = compiler.compile(model, example)
    assert second.compile_stats.cache.startswith("hit")
    assert second.asm == first.asm and second.hlo == first.hlo and second.reports == first.reports
    np.testing.assert_array_equal(second.run(*example)[0], first.run(*example)[0])
    assert "by trace" in second.compile_stats.cache  # found before capturing the model
    assert len(CompileCache.default().entries()) == 2  # the program, and its trace key pointing to it


def test_saving_a_cached_program_links_its_weights(tmp_path):
    model, example = _model()
    exe = compiler.compile(model, example)
    (entry,) = [path for _, _, path in CompileCache.default().entries() if (path / "program.neff").exists()]
    exe.save(tmp_path / "m.neff", weights="external")
    assert weights.side_path(tmp_path / "m.neff").samefile(weights.side_path(entry / "program.neff"))
    again = compiler.load(tmp_path / "m.neff")
    np.testing.assert_array_equal(again.run(*example)[0], exe.run(*example)[0])


@pytest.mark.parametrize("mode", ["auto", "inline", "external"])
def test_a_hit_saved_undecoded_writes_the_bytes_of_the_decoded_program(tmp_path, mode):
    """A cache hit saved before its program is used rewrites the entry's .neff (header with the new meta, the
    instruction section copied) instead of decoding and encoding it: the same file as the decoded program's."""
    model, example = _model()
    compiler.compile(model, example)
    fast, slow = compiler.compile(model, example), compiler.compile(model, example)
    assert isinstance(fast, StoredExecutable) and fast.compile_stats.cache.startswith("hit")
    assert fast.summary() == slow.summary()  # from the header, without decoding
    decoded = slow.program  # decoded: saved by encoding it
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    fast.save(tmp_path / "a" / "m.neff", weights=mode)
    assert fast._program is None  # never decoded
    slow.save(tmp_path / "b" / "m.neff", weights=mode)
    assert (tmp_path / "a" / "m.neff").read_bytes() == (tmp_path / "b" / "m.neff").read_bytes()
    assert weights.side_path(tmp_path / "a" / "m.neff").exists() == (mode == "external")
    again = compiler.load(tmp_path / "a" / "m.neff")
    np.testing.assert_array_equal(again(*example).numpy(), slow(*example).numpy())
    assert fast.summary() == (decoded.target, len(decoded.instructions), 1, 1)


def test_options_that_change_the_program_change_the_key_and_the_others_do_not(tmp_path):
    model, example = _model()
    compiler.compile(model, example)
    assert compiler.compile(model, example, opt_level=1).compile_stats.cache.startswith("miss")
    assert compiler.compile(model, example, timing=True, quiet=True).compile_stats.cache.startswith("hit")
    with torch.no_grad():
        model.layers[0].weight[0, 0] += 1  # other weights: another program
    assert compiler.compile(model, example).compile_stats.cache.startswith("miss")


def test_no_cache_and_dump_dir_skip_it(tmp_path):
    model, example = _model()
    assert compiler.compile(model, example, cache=False).compile_stats.cache == "off"
    assert compiler.compile(model, example, dump_dir=str(tmp_path / "d")).compile_stats.cache == "off"
    assert CompileCache.default().entries() == []


def test_an_unreadable_entry_is_compiled_again():
    model, example = _model()
    compiler.compile(model, example)
    (entry,) = [path for _, _, path in CompileCache.default().entries() if (path / "program.neff").exists()]
    (entry / "program.neff").write_bytes(b"junk")
    again = compiler.compile(model, example)
    assert again.compile_stats.cache.startswith("miss")
    np.testing.assert_allclose(again.run(*example)[0], model(*example).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_compile_stats_name_every_phase():
    model, example = _model()
    stats = compiler.compile(model, example, cache=False).compile_stats
    names = [p.name for p in stats.phases]
    assert names[0] == "capture"
    for phase in ("fusion", "cse", "lowering", "allocation", "scheduling", "emission"):
        assert phase in names, phase
    assert all(p.seconds >= 0 and p.peak_bytes > 0 for p in stats.phases)
    table = stats.table()
    assert "peak RSS (MiB)" in table and "scheduling" in table and table.splitlines()[-2].startswith("total")


def test_cli_time_passes_weights_and_a_hit_in_a_new_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NEURONC_CACHE_VERSION", f"test-{os.getpid()}-{tmp_path.name}")  # immune to source edits
    out = tmp_path / "mlp.neff"
    assert main(["compile", str(EXAMPLE), "-o", str(out), "--time-passes", "--weights", "external"]) == 0
    text = capsys.readouterr().out
    assert "lowering" in text and "compile cache: miss" in text
    assert weights.side_path(out).exists()
    assert main(["run", str(out), "--checks", "off", "--quiet"]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from compiler.cli import main; sys.exit(main())"
    second = subprocess.run([sys.executable, "-c", code, "compile", str(EXAMPLE), "-o", str(tmp_path / "b.neff"),
                             "--weights", "inline"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert second.returncode == 0, second.stderr
    assert "compile cache hit" in second.stderr
    assert not weights.side_path(tmp_path / "b.neff").exists()


@pytest.mark.parametrize("checks", ["off", "rules", "full"])
def test_executable_runs_at_every_checks_level_alike(checks):
    model, example = _model()
    exe = compiler.compile(model, example, cache=False)
    reference = exe.run(*example)[0]
    for _ in range(2):  # decoded once, then replayed
        np.testing.assert_array_equal(exe.run(*example, checks=checks)[0], reference)
    assert exe.profile(*example, checks=checks).time_us == exe.profile(*example).time_us


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_only_on_a_terminal_after_the_delay():
    tty = _Tty()
    quiet = Progress(stream=tty, delay_s=0.0, enabled=False)
    quiet.update("fusion", 3)
    assert tty.getvalue() == ""
    early = Progress(stream=tty, delay_s=3600.0)
    early.update("fusion", 3)
    assert tty.getvalue() == ""
    shown = Progress(stream=tty, delay_s=0.0)
    shown.update("fusion", 3)
    assert "compiling: fusion (phase 4)" in tty.getvalue()
    shown.close()
    pipe = io.StringIO()  # not a terminal: silent
    Progress(stream=pipe, delay_s=0.0).update("fusion", 3)
    assert pipe.getvalue() == ""


@pytest.mark.parametrize("cache", [False, True])
def test_a_compiled_program_does_not_change_when_its_model_does(cache):
    """The frontend shares the weights' memory with torch instead of copying them; the finished program
    must still be a snapshot (an embedding reaches it as it is, linear weights re-laid out)."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 8)).eval()
    ids = torch.randint(0, 50, (2, 6), dtype=torch.int32)
    exe = compiler.compile(model, (ids,), cache=cache)
    with torch.no_grad():
        expected = model(ids).numpy()
        before = exe(ids).numpy()
        for p in model.parameters():
            p.mul_(-3.0).add_(1.0)
        after = exe(ids).numpy()
    np.testing.assert_allclose(before, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(after, before)
    assert all(not np.shares_memory(a, p.detach().numpy()) for a in exe.program.constants.values()
               for p in model.parameters())
