"""compile --autotune: per-shape tile choices on the emulator's timing, through the sweep's executor."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from compiler.autotune import CANDIDATES, TuningStore, autotune
from compiler.sweep import LocalExecutor
from tests.sweep.util import ROOT, env, write_model


def test_autotune_searches_each_shape_then_reuses_the_store(tmp_path):
    model = write_model(tmp_path, "tiny", 256)
    store_path = tmp_path / "cache" / "choices.json"
    stream = io.StringIO()
    few = {"dot": ({"moving_tile": 128}, {"max_stationary_blocks": 1}, CANDIDATES["dot"][-1], {"moving_tile": 9999})}
    result = autotune(model, {}, LocalExecutor(workers=2), store=TuningStore(store_path), stream=stream,
                      candidates=few)
    assert result.shapes == ["dot:1x8x32x256:f32", "dot:1x8x256x16:f32"]
    assert len(result.trials) in (1 + 2 * 4, 2 + 2 * 4)  # default, 4 per shape (and the winners together)
    assert any("allowed: 1..512" in t.error for t in result.trials)  # an impossible tiling fails, the rest goes on
    assert all(t.sim_us is not None or t.error for t in result.trials)
    assert result.tuned_us <= result.baseline_us and result.gain >= 1.0
    for shape in result.shapes:
        assert shape in result.report() and result.reasons[shape]
    stored = json.loads(store_path.read_text())["entries"]
    assert sorted(k.split("|")[0] for k in stored) == sorted(result.shapes)
    again = autotune(model, {}, LocalExecutor(workers=1), store=TuningStore(store_path), stream=io.StringIO())
    assert len(again.trials) == 1  # the default only: both shapes came from the store
    assert again.overrides == result.overrides and "from the tuning store" in again.reasons[result.shapes[0]]


@pytest.mark.slow
def test_compile_autotune_writes_its_choices_in_the_dump(tmp_path):
    model = write_model(tmp_path, "tiny", 256)
    cli = [sys.executable, "-c", "import sys; from compiler.cli import main; sys.exit(main())"]
    done = subprocess.run(cli + ["compile", model, "-o", str(tmp_path / "t.neff"), "--autotune",
                                 "--autotune-workers", "2", "--dump-dir", str(tmp_path / "dump")], cwd=ROOT,
                          env={**env(), "NEURONC_CACHE_DIR": str(tmp_path / "cache")}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "autotune: 2 GEMM/conv shapes (0 from the tuning store)" in done.stderr
    report = (tmp_path / "dump" / "autotune.txt").read_text()
    assert report.startswith("# autotune: 2 GEMM/conv shapes") and "default tiling" in report
    assert (tmp_path / "cache" / "autotune" / "choices.json").exists()
    assert "dot:1x8x32x256:f32" in (tmp_path / "dump" / "tiling.txt").read_text()
