"""Where the time goes: the attribution rule, by-op and by-layer rows, tables, CSV and the HTML report."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import ml_dtypes
import numpy as np
import pytest

from isa.emulator import run_program
from isa.emulator.attribution import UNTAGGED, Records, attribute, layer_of
from isa.emulator.report import TIMELINE_WIDTH, column_winners
from isa.program import Origin, Source
from isa.target import load_target
from tests.isa.test_emulator_numerics import matmul_program

K, M, N = 128, 64, 256


def _records(rows: list[tuple], total: float, names: list[str]) -> Records:
    """rows: (origin id, engine index, start, end, queue, transfer start, transfer end)."""
    col = list(zip(*rows, strict=True))
    n = len(rows)
    return Records(names, np.array(col[0], np.int32), np.array(col[1], np.int8), np.array(col[2], float),
                   np.array(col[3], float), np.zeros(n), np.array(col[4], np.int16), np.array(col[5], float),
                   np.array(col[6], float), np.where(np.array(col[4]) >= 0, 1000, 0).astype(np.int64),
                   np.zeros(n, np.int64), np.ones(len(names)), total)


def test_the_rule_by_hand() -> None:
    """PE runs A over [0,3); SP triggers B's DMA over [0,1), whose fixed cost runs to 5 and transfer
    to 15; nothing runs over [15,20) until ACT starts C, which runs to 25:
    [0,1) PE and SP share: A .5, B .5 (overhead); [1,3) A 2; [3,5) only B's fixed cost: B 2
    (overhead); [5,15) B's transfer 10 (memory); [15,20) empty: C, which starts at 20, 5 (overhead);
    [20,25) C 5 (compute)."""
    rec = _records([(0, 0, 0, 3, -1, 0, 0), (1, 4, 0, 1, 0, 5, 15), (2, 1, 20, 25, -1, 0, 0)], 25.0,
                   ["A", "B", "C"])
    got = attribute(rec)
    np.testing.assert_allclose(got, [[2.5, 0, 0], [0, 10, 2.5], [5, 0, 5]])
    assert got.sum() == pytest.approx(25.0)


def test_concurrent_work_of_one_resource_is_split_and_dma_queues_count_as_one() -> None:
    """Two transfers over [0,10) on two queues and PE over [0,10): PE's op gets half, each transfer a
    quarter; the SP triggers at [-) are empty here (zero length)."""
    rec = _records([(0, 0, 0, 10, -1, 0, 0), (1, 4, 0, 0, 0, 0, 10), (2, 4, 0, 0, 1, 0, 10)], 10.0,
                   ["mm", "load.a", "load.b"])
    np.testing.assert_allclose(attribute(rec).sum(axis=1), [5.0, 2.5, 2.5])


def _tagged_matmul_run():
    prog = matmul_program("bf16", K, M, N)
    for i, inst in enumerate(prog.instructions):
        inst.origin = "fusion.1" if i < 10 else "copy.2"
    prog.origins = {
        "fusion.1": Origin((Source("net.fc", "aten.addmm", "net.py:10"), Source("net.act", "aten.relu", "net.py:11")),
                           flops=2 * 2 * K * M * N, hbm_bytes=2 * K * N * 2 + 2 * K * M * 2 + M * 4),
        "copy.2": Origin((Source("", "aten.clone", ""),), flops=0, hbm_bytes=2 * M * N * 4),
    }
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((2 * K, N)).astype(ml_dtypes.bfloat16),
              "w": rng.standard_normal((2 * K, M)).astype(ml_dtypes.bfloat16),
              "b": rng.standard_normal((M, 1)).astype(np.float32)}
    return prog, run_program(prog, inputs).profile


def test_by_op_rows_sum_to_the_run_and_carry_the_figures() -> None:
    prog, prof = _tagged_matmul_run()
    rows = prof.by_op()
    assert {r.name for r in rows} == {"fusion.1", "copy.2"}
    assert sum(r.time_us for r in rows) == pytest.approx(prof.time_us, rel=1e-9)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    fc = next(r for r in rows if r.name == "fusion.1")
    assert fc.instructions == 10 and fc.dma_count == 5
    assert fc.dma_bytes == 2 * K * N * 2 + 2 * K * M * 2 + M * 4 == fc.dma_hbm_bytes
    assert fc.bytes_per_dma == pytest.approx(fc.dma_bytes / 5)
    assert fc.source == "net.fc: aten.addmm; net.act: aten.relu" and fc.modules == ("net.fc", "net.act")
    assert fc.dma_gbps == pytest.approx(fc.dma_bytes / fc.busy_us["dma"] / 1e3)
    assert fc.locations == ("net.py:10", "net.py:11")
    target = load_target("trn1")
    compute_us = fc.flops / target.pe_peak_flops_bf16 * 1e6
    memory_us = fc.hbm_bytes / target.data["hbm"]["bytes_per_ns"] / 1000
    assert fc.bound_us == pytest.approx(max(compute_us, memory_us)) and fc.roof == "memory"
    assert fc.compute_us + fc.memory_us + fc.overhead_us == pytest.approx(fc.time_us)
    pe_ghz = target.clock_ghz("pe")
    assert fc.busy_us["pe"] == pytest.approx((2 * 256 + 2 * 0.25 * 64) / pe_ghz / 1000)
    copy = next(r for r in rows if r.name == "copy.2")
    assert copy.flops == 0 and copy.roof == "memory" and copy.source == "(top): aten.clone"
    assert copy.bound_by in ("memory", "overhead")


def test_untagged_instructions_form_their_own_row() -> None:
    prog, _ = _tagged_matmul_run()
    prog.instructions[0].origin = ""
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((2 * K, N)).astype(ml_dtypes.bfloat16),
              "w": rng.standard_normal((2 * K, M)).astype(ml_dtypes.bfloat16),
              "b": np.zeros((M, 1), np.float32)}
    prof = run_program(prog, inputs).profile
    names = [r.name for r in prof.by_op()]
    assert UNTAGGED in names and sum(r.time_us for r in prof.by_op()) == pytest.approx(prof.time_us)


def test_by_layer_splits_rows_over_their_modules_and_keeps_the_sum() -> None:
    _, prof = _tagged_matmul_run()
    fc = next(r for r in prof.by_op() if r.name == "fusion.1")
    full = {g.path: g for g in prof.by_layer()}
    assert set(full) == {"net.fc", "net.act", "(no module)"}
    assert full["net.fc"].time_us == pytest.approx(fc.time_us / 2)
    top = prof.by_layer(1)
    assert [g.path for g in top if g.path == "net"] and len(top) == 2
    assert sum(g.time_us for g in top) == pytest.approx(prof.time_us)
    assert prof.traced_fraction() == pytest.approx(fc.share)
    assert layer_of("h.0.attn.c_attn", 2) == "h.0" and layer_of("h.0", None) == "h.0"


def test_tables_and_csv() -> None:
    _, prof = _tagged_matmul_run()
    text = prof.table("op", top=1)
    assert "of bound" in text and "B/DMA" in text and "(1 more)" in text and "top stalls by op" in text
    assert f"(run: {prof.time_us:.2f} us)" in text
    assert "net.fc" in prof.table("layer")
    rows = list(csv.DictReader(io.StringIO(prof.csv("op"))))
    assert {r["name"] for r in rows} == {"fusion.1", "copy.2"}
    assert sum(float(r["time_us"]) for r in rows) == pytest.approx(prof.time_us)
    layers = list(csv.DictReader(io.StringIO(prof.csv("layer", depth=1))))
    assert {r["path"] for r in layers} == {"net", "(no module)"}
    with pytest.raises(ValueError, match="by must be"):
        prof.table("engine")


class _Balance(HTMLParser):
    VOID = {"meta", "br", "img", "input", "hr", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.seen: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.seen.append(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.seen.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def check_html(path) -> str:
    """The report is balanced HTML, its SVGs parse as XML, and it loads nothing from elsewhere."""
    text = path.read_text()
    parser = _Balance()
    parser.feed(text)
    parser.close()
    assert parser.stack == []
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    assert "<script" not in text and "<link" not in text
    start = 0
    while (start := text.find("<svg", start)) >= 0:
        end = text.index("</svg>", start) + len("</svg>")
        ET.fromstring(text[start:end])
        start = end
    return text


def test_html_report_is_self_contained_and_has_every_section(tmp_path) -> None:
    _, prof = _tagged_matmul_run()
    size = prof.save_html(str(tmp_path / "r.html"))
    text = check_html(tmp_path / "r.html")
    assert size == len(text.encode())
    for section in ("Timeline", "Roofline", "By layer", "By op", "DMA transfer sizes"):
        assert f"<h2>{section}</h2>" in text
    assert text.count('aria-label="per-engine timeline"') == 1 and 'aria-label="roofline"' in text
    assert "fusion.1" in text and "net.fc" in text and "<circle" in text


def test_timeline_columns_take_the_busiest_op() -> None:
    start, end, origin = np.array([0.0, 0.2, 1.0, 5.0]), np.array([0.1, 0.9, 4.0, 5.5]), np.array([0, 1, 2, 3])
    winner, busy = column_winners(start, end, origin, 1.0, 8)
    assert winner.tolist() == [1, 2, 2, 2, -1, 3, -1, -1]
    np.testing.assert_allclose(busy, [0.8, 1, 1, 1, 0, 0.5, 0, 0])


def test_report_of_many_instructions_stays_small(tmp_path, monkeypatch) -> None:
    """The timeline has at most TIMELINE_WIDTH rectangles per track whatever the program's length."""
    n = 200_000
    rng = np.random.default_rng(1)
    starts = np.sort(rng.uniform(0, 1e7, n))
    rec = Records([f"fusion.{i}" for i in range(500)], rng.integers(0, 500, n).astype(np.int32),
                  rng.integers(0, 4, n).astype(np.int8), starts, starts + 30.0, np.zeros(n),
                  np.full(n, -1, np.int16), np.zeros(n), np.zeros(n), np.zeros(n, np.int64),
                  np.zeros(n, np.int64), np.ones(500), float(starts[-1] + 30.0))
    _, prof = _tagged_matmul_run()
    prof.records, prof._rows, prof.origins = rec, None, {}
    prof.time_us = rec.total_ns / 1000
    assert sum(r.time_us for r in prof.by_op()) == pytest.approx(prof.time_us)
    monkeypatch.setattr("isa.emulator.report.MAX_OP_ROWS", 100)
    size = prof.save_html(str(tmp_path / "big.html"))
    text = check_html(tmp_path / "big.html")
    assert text.count("<rect") <= 6 * TIMELINE_WIDTH + 100 and size < 5_000_000
    assert "(400 more ops: see --csv)" in text
    json.dumps([r.to_dict() for r in prof.by_op()])


def test_trace_has_op_and_layer_args_and_op_slices(tmp_path) -> None:
    _, prof = _tagged_matmul_run()
    prof.save_trace(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    boxes = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert {e["args"]["op"] for e in boxes} == {"fusion.1", "copy.2"}
    assert {e["args"]["layer"] for e in boxes if e["args"]["op"] == "fusion.1"} == {"net.fc, net.act"}
    ops = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert {e["name"] for e in ops} == {"fusion.1", "copy.2"} and all(e["cat"] == "op" for e in ops)
    assert sum(e["args"]["instructions"] for e in ops if e["tid"] == ops[0]["tid"]) == sum(
        1 for e in boxes if e["tid"] == ops[0]["tid"])
    for tid in {e["tid"] for e in ops}:  # op slices of a track never overlap
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in ops if e["tid"] == tid)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(mine, mine[1:]))
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {"NeuronCore", "HLO ops"}


def test_empty_and_single_instruction_programs(tmp_path) -> None:
    from isa.program import Instruction, Program

    prof = run_program(Program("trn1"), {}).profile
    assert prof.by_op() == [] and prof.by_layer() == [] and prof.traced_fraction() == 0
    assert "total" in prof.table("op")
    prof.save_html(str(tmp_path / "empty.html"))
    check_html(tmp_path / "empty.html")
    prof = run_program(Program("trn1", instructions=[Instruction("pe", "nop", origin="x")]), {}).profile
    (row,) = prof.by_op()
    assert row.name == "x" and row.time_us == pytest.approx(prof.time_us) and row.bound_by == "compute"
    prof.save_html(str(tmp_path / "one.html"))
    check_html(tmp_path / "one.html")
