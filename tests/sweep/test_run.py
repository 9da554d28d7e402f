"""Sweeps end to end on the local pool: a failing point, crashed workers, kill and resume."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import time

import pytest

from compiler.sweep import LocalExecutor, ModelSpec, PluginSpec, Sweep, parse_grid, run_sweep
from compiler.sweep.results import read_rows
from tests.sweep.util import CRASH_ALWAYS, CRASH_ONCE, ROOT, env, sweep_command, write_model


def test_failing_point_crashed_workers_and_resume(tmp_path):
    """One sweep: a point the compiler refuses, a model that kills its first worker (retried: ok), a model
    that kills every worker (crashed); the rest runs. Run again, nothing is redone."""
    write_model(tmp_path, "tiny")
    (tmp_path / "flaky.py").write_text(CRASH_ONCE.format(mark=str(tmp_path / "mark")))
    (tmp_path / "dies.py").write_text(CRASH_ALWAYS)
    sweep = Sweep([ModelSpec.from_file(str(tmp_path / f)) for f in ("tiny.py", "flaky.py", "dies.py")],
                  parse_grid(["scheduler=dma_first,nonsense"]),  # dma_first: a plug-in, shipped to the workers
                  plugins=[PluginSpec.from_file(str(ROOT / "examples" / "plugins" / "dma_first_scheduler.py"))])
    stream = io.StringIO()
    report = run_sweep(sweep, tmp_path / "out", LocalExecutor(workers=2), stream=stream)
    status = [(r["model"], r["scheduler"], r["status"]) for r in report.rows]
    assert status == [("tiny", "dma_first", "ok"), ("tiny", "nonsense", "failed"), ("flaky", "dma_first", "ok"),
                      ("flaky", "nonsense", "failed"), ("dies", "dma_first", "crashed"),
                      ("dies", "nonsense", "crashed")]
    assert (tmp_path / "mark").exists()  # the flaky model did kill a worker
    failed = report.rows[1]
    assert "is not one of list" in failed["error"] and "nonsense" in failed["error"] and failed["sim_us"] == ""
    assert "died twice" in report.rows[4]["error"] and "exit code 9" in report.rows[4]["error"]
    ok = report.rows[0]
    assert float(ok["sim_us"]) > 0 and int(ok["hbm_bytes"]) > 0 and int(ok["peak_sbuf_bytes"]) > 0
    assert 0 < float(ok["mfu"]) <= 1 and float(ok["max_rel_err"]) < 1e-4 and float(ok["compile_s"]) > 0
    assert "ETA" in stream.getvalue()
    assert {p.name for p in report.files} == {"results.csv", "pareto.png", "bars_tiny.png", "bars_flaky.png",
                                               "bars_dies.png"}
    assert (tmp_path / "out" / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (tmp_path / "out" / "results.csv").read_text()
    assert text.splitlines()[0].split(",") == ["model", "scheduler", "sim_us", "mfu", "hbm_bytes", "peak_sbuf_bytes",
                                               "compile_s", "max_rel_err", "instructions", "status", "error"]
    again = run_sweep(sweep, tmp_path / "out", LocalExecutor(workers=2), stream=io.StringIO())
    assert again.resumed == 6 and again.ran == 0 and again.rows == report.rows
    assert (tmp_path / "out" / "results.csv").read_text() == text


def _rows(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.slow
def test_killed_half_way_the_sweep_resumes_without_redoing_points(tmp_path):
    models = [write_model(tmp_path, "small", 32), write_model(tmp_path, "wide", 128)]
    out = tmp_path / "out"
    args = ["--models", *models, "--grid", "fusion=none,greedy", "scheduler=inorder,list", "--out", str(out),
            "--workers", "1", "--no-charts"]
    proc = subprocess.Popen(sweep_command(*args), cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(read_rows(out / "results.csv")) < 3:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker, mid-sweep
    proc.wait()
    before = read_rows(out / "results.csv")
    assert 3 <= len(before) < 8
    done = subprocess.run(sweep_command(*args), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(before)} already in" in done.stderr and f"{8 - len(before)} to run" in done.stderr
    after = read_rows(out / "results.csv")
    assert len(after) == 8 and all(r["status"] == "ok" for r in after)
    by_key = {(r["model"], r["fusion"], r["scheduler"]): r for r in after}
    for row in before:  # done points kept as they were (compile_s too: they did not run again)
        assert by_key[(row["model"], row["fusion"], row["scheduler"])] == row
    assert [(r["model"], r["fusion"], r["scheduler"]) for r in after] == [
        (m, f, s) for m in ("small", "wide") for f in ("none", "greedy") for s in ("inorder", "list")]
    again = subprocess.run(sweep_command(*args), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert "8 already in" in again.stderr and "0 to run" in again.stderr


@pytest.mark.slow
def test_ray_gives_the_local_rows(tmp_path):
    pytest.importorskip("ray")
    models = [write_model(tmp_path, "small", 32), write_model(tmp_path, "wide", 128)]
    grid = ["fusion=none,greedy", "scheduler=inorder,list,bogus"]
    local = subprocess.run(sweep_command("--models", *models, "--grid", *grid, "--out", str(tmp_path / "local"),
                                         "--workers", "2"), cwd=ROOT, env=env(), capture_output=True, text=True,
                           timeout=600)
    ray = subprocess.run(sweep_command("--models", *models, "--grid", *grid, "--out", str(tmp_path / "ray"),
                                       "--workers", "2", "--ray"), cwd=ROOT, env=env(), capture_output=True,
                         text=True, timeout=600)
    assert local.returncode == 0 and ray.returncode == 0, (local.stderr, ray.stderr)
    assert "on ray" in ray.stderr
    strip = lambda rows: [{k: v for k, v in r.items() if k != "compile_s"} for r in rows]  # a wall time
    local_rows, ray_rows = _rows(tmp_path / "local" / "results.csv"), _rows(tmp_path / "ray" / "results.csv")
    assert len(local_rows) == 12 and strip(local_rows) == strip(ray_rows)
    assert sum(r["status"] == "failed" for r in ray_rows) == 4
    assert (tmp_path / "ray" / "pareto.png").exists() and (tmp_path / "ray" / "bars_wide.png").exists()
