"""The sweep's grid, points, results.csv and progress line (no compilation)."""

from __future__ import annotations

import pytest

from compiler.sweep.grid import ModelSpec, Sweep, SweepError, parse_grid, typed_value
from compiler.sweep.plots import pareto_front
from compiler.sweep.progress import Progress
from compiler.sweep.results import ResultsFile, read_rows
from tests.sweep.util import write_model


def test_parse_grid_keeps_order_and_text():
    grid = parse_grid(["fusion=none,greedy,cost", "scheduler=inorder,list", "dma-queues=4,16"])
    assert grid == {"fusion": ("none", "greedy", "cost"), "scheduler": ("inorder", "list"), "dma_queues": ("4", "16")}


@pytest.mark.parametrize("word, message", [
    ("fusion", "expected KEY=V1,V2"), ("=a,b", "expected KEY=V1,V2"), ("fusion=a,,b", "empty value"),
    ("fusion=a,a", "repeated"), ("model=x", "not an option"), ("1x=2", "expected KEY=V1,V2"),
])
def test_parse_grid_refuses(word, message):
    with pytest.raises(SweepError, match=message):
        parse_grid([word])


def test_parse_grid_refuses_an_option_twice():
    with pytest.raises(SweepError, match="given twice"):
        parse_grid(["fusion=none", "fusion=greedy"])


def test_typed_values():
    assert typed_value("16") == 16 and typed_value("-2") == -2
    assert typed_value("0.5") == 0.5 and typed_value("1e3") == 1000.0
    assert typed_value("true") is True and typed_value("False") is False
    assert typed_value("none") == "none" and typed_value("list") == "list"


def test_points_models_outermost_in_grid_order(tmp_path):
    a, b = write_model(tmp_path, "a"), write_model(tmp_path, "b")
    sweep = Sweep([ModelSpec.from_file(a), ModelSpec.from_file(b)], parse_grid(["f=x,y", "s=1,2"]))
    points = sweep.points()
    assert [p.key for p in points[:4]] == [("a", "f=x", "s=1"), ("a", "f=x", "s=2"), ("a", "f=y", "s=1"),
                                           ("a", "f=y", "s=2")]
    assert [p.model for p in points] == ["a"] * 4 + ["b"] * 4
    assert points[1].label == "x/2" and points[1].compile_kwargs({"opt_level": "1"}) == {"f": "x", "s": 2,
                                                                                         "opt_level": 1}


def test_sweep_refuses_bad_setups(tmp_path):
    with pytest.raises(SweepError, match="no such file"):
        ModelSpec.from_file(str(tmp_path / "missing.py"))
    (tmp_path / "sub").mkdir()
    a, a2 = write_model(tmp_path, "a"), write_model(tmp_path / "sub", "a")
    with pytest.raises(SweepError, match="same name 'a'"):
        Sweep([ModelSpec.from_file(a), ModelSpec.from_file(a2)], {})
    with pytest.raises(SweepError, match="both in the grid and fixed"):
        Sweep([ModelSpec.from_file(a)], {"fusion": ("none",)}, fixed={"fusion": "cost"})


def test_results_file_appends_resumes_and_drops_cut_lines(tmp_path):
    a = write_model(tmp_path, "a")
    sweep = Sweep([ModelSpec.from_file(a)], parse_grid(["f=x,y,z"]))
    x, y, z = sweep.points()
    path = tmp_path / "results.csv"
    results = ResultsFile(path, ["f"], [])
    results.add({"model": "a", "f": "x", "sim_us": "1.000", "status": "ok", "error": ""})
    results.add({"model": "a", "f": "y", "status": "failed", "error": "ValueError: no"})
    with open(path, "a") as f:
        f.write("a,z,3.0")  # the line in flight when the sweep was killed
    rows = read_rows(path)
    assert [(r["f"], r["status"]) for r in rows] == [("x", "ok"), ("y", "failed")]
    again = ResultsFile(path, ["f"], rows)
    assert again.done(x) and again.done(y) and not again.done(z)
    assert not again.done(y, retry_failed=True)
    again.add({"model": "a", "f": "z", "sim_us": "2.000", "status": "ok", "error": ""})
    assert [r["f"] for r in again.finish([z, y, x])] == ["z", "y", "x"]
    assert [r["f"] for r in read_rows(path)] == ["z", "y", "x"]


def test_results_file_refuses_a_foreign_csv(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(SweepError, match="not a results.csv"):
        read_rows(path)


def test_pareto_front():
    points = [(1.0, 9.0), (2.0, 5.0), (3.0, 6.0), (4.0, 1.0), (2.0, 7.0), (5.0, 1.0)]
    assert pareto_front(points) == [0, 1, 3]


def test_progress_line_has_an_eta():
    class Sink:
        text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    sink = Sink()
    progress = Progress(10, skipped=2, stream=sink, width=10)
    progress.t0 -= 20
    progress.update(True, "a x")
    progress.update(False, "a y")
    line = progress.line(now=progress.t0 + 20)
    assert line.startswith("[####......] 4/10 points (2 resumed, 1 not ok), elapsed 0m20s, ETA 1m00s")
    assert "a y" in sink.text
