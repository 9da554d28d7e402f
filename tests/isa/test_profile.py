"""Profile contents, summary table, JSON forms, the Chrome trace and the progress bar."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from isa.asm import print_instruction, print_program
from isa.emulator import ProgressBar, run_program
from isa.emulator.trace import format_instruction
from isa.target import load_target
from tests.isa.emulator_helpers import hb, ins
from tests.isa.test_emulator_numerics import matmul_program

K, M, N = 128, 64, 256


def matmul_run(meta=None):
    prog = matmul_program("bf16", K, M, N)
    prog.meta.update(meta or {})
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((2 * K, N)).astype(ml_dtypes.bfloat16),
              "w": rng.standard_normal((2 * K, M)).astype(ml_dtypes.bfloat16),
              "b": rng.standard_normal((M, 1)).astype(np.float32)}
    return prog, run_program(prog, inputs).profile


def test_profile_figures_of_a_matmul_program():
    prog, profile = matmul_run()
    assert profile.hbm_read_bytes == 2 * K * N * 2 + 2 * K * M * 2 + M * 4
    assert profile.hbm_write_bytes == M * N * 4
    assert profile.instruction_counts == {"sp.dma": 6, "pe.load_stationary": 2, "pe.multiply_moving": 2,
                                          "act.activation": 1}
    pe_ghz = load_target("trn1").clock_ghz("pe")
    assert profile.cycles == pytest.approx(profile.time_us * 1000 * pe_ghz)
    assert profile.mfu == pytest.approx(2 * K * M * N / (128 * 128 * profile.cycles))
    assert set(profile.engine_busy) == {"pe", "act", "dve", "pool", "sp", "dma"}
    assert all(0.0 <= v <= 1.0 for v in profile.engine_busy.values())
    assert profile.engine_busy["dve"] == 0.0 and profile.engine_busy["dma"] > 0.5
    assert profile.peak_sbuf_bytes == 0
    # PE waited for the loads, ACT for PE, SP's output DMA for ACT
    assert set(profile.stalls["pe"]) <= {f"dma.q{q}" for q in range(5)}
    assert set(profile.stalls["act"]) == {"pe"} and set(profile.stalls["sp"]) == {"act"}


def test_meta_overrides_useful_macs_and_gives_peak_sbuf():
    _, profile = matmul_run({"useful_macs": K * M * N, "peak_sbuf_bytes": 12345})
    assert profile.mfu == pytest.approx(K * M * N / (128 * 128 * profile.cycles))
    assert profile.peak_sbuf_bytes == 12345


def test_summary_table_lists_time_mfu_busy_traffic_counts_and_stalls():
    _, profile = matmul_run()
    text = profile.summary()
    assert f"{profile.time_us:.3f} us" in text and "MFU" in text and "GB/s" in text
    for engine in ("pe", "act", "dve", "pool", "sp", "dma"):
        assert any(line.startswith(engine) for line in text.splitlines())
    assert "pe.multiply_moving" in text and "top stalls" in text and "act    <- pe" in text


def test_to_dict_is_json_serializable():
    _, profile = matmul_run()
    data = json.loads(json.dumps(profile.to_dict()))
    assert data["time_us"] == profile.time_us and data["instruction_counts"]["sp.dma"] == 6
    assert data["engine_busy"]["pe"] == profile.engine_busy["pe"]


def test_chrome_trace_has_a_track_per_engine_and_queue_and_instruction_text(tmp_path):
    prog, profile = matmul_run()
    path = tmp_path / "trace.json"
    profile.save_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    names = {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name"}
    assert set(names) == {"pe", "act", "dve", "pool", "sp", *(f"dma.q{q}" for q in range(16))}
    boxes = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert len(boxes) == len(prog.instructions) + 6  # every instruction, plus one box per transfer
    mm = [e for e in boxes if e["name"] == "pe.multiply_moving"]
    assert [e["tid"] for e in mm] == [names["pe"]] * 2
    # the instruction's text is its line of the .s file, as the assembler's printer writes it
    lines = print_program(prog).splitlines()[-len(prog.instructions):]
    assert all(e["args"]["instruction"] == lines[e["args"]["index"]] for e in boxes)
    assert mm[1]["args"]["instruction"] == ("pe.multiply_moving dst=psum[0:64]@0[1,256]:f32 "
                                            "src=sbuf[0:128]@4096[1,256]:bf16 acc=1 signal(s1)")
    transfers = [e for e in boxes if e["tid"] == names["dma.q1"]]
    assert len(transfers) == 1 and transfers[0]["dur"] > 1.0  # us
    end = max(e["ts"] + e["dur"] for e in boxes)
    assert end == pytest.approx(profile.time_us)


def test_semaphore_waits_are_flow_arrows_from_the_releasing_instruction(tmp_path):
    """load_stationary waits s0>=5: released by the last of the five loads' *transfers* to complete;
    activation waits s1>=1 (the second multiply_moving); the output DMA waits s2>=1 (activation)."""
    prog, profile = matmul_run()
    profile.save_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == 3
    boxes = [e for e in events if e["ph"] == "X" and e["pid"] == 1]

    def box_at(event):  # the slice a flow event binds to: on its thread, the innermost enclosing its time
        enclosing = [b for b in boxes if b["tid"] == event["tid"] and b["ts"] < event["ts"] < b["ts"] + b["dur"]]
        return min(enclosing, key=lambda b: b["dur"])

    arrows = {starts[i]["name"]: (box_at(starts[i]), box_at(ends[i])) for i in starts}
    assert all(ends[i]["bp"] == "e" and starts[i]["cat"] == "semaphore" for i in starts)
    source, target = arrows["s0>=5"]
    assert tracks[source["tid"]].startswith("dma.q") and target["name"] == "pe.load_stationary"
    last_transfer = max((b for b in boxes if tracks[b["tid"]].startswith("dma.q") and b["args"]["index"] < 5),
                        key=lambda b: b["ts"] + b["dur"])
    assert source is last_transfer
    assert [b["name"] for b in arrows["s1>=1"]] == ["pe.multiply_moving", "act.activation"]
    assert arrows["s1>=1"][0]["args"]["index"] == 8  # the second one
    assert [b["name"] for b in arrows["s2>=1"]] == ["act.activation", "sp.dma"]


def test_format_instruction_is_the_printed_line_and_survives_unprintable_values():
    inst = ins("sp", "dma", dst=hb("y", 64, [[16, 4], [1, 16]]), src=hb("x", 0, [[0, 4], [2, 8]], "bf16"),
               queue=3, waits=[(1, 2), (4, 1)], signals=[7])
    inst.comment = "load x"
    assert format_instruction(inst) == print_instruction(inst) == (
        "sp.dma dst=hbm:y@64[16,4][1,16]:f32 src=hbm:x@0[0,4][2,8]:bf16 queue=3 "
        "wait(s1>=2,s4>=1) signal(s7)  ; load x")
    odd = ins("dve", "memset", dst=hb("y", 0, [[1, 2]]), value=1.0)
    odd.operands["dst"] = replace(odd.operands["dst"], start_partition=3)  # text cannot say this
    assert format_instruction(odd) == "dve.memset dst=hbm:y[3+2]@0:f32 value=1.0"


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_tty_after_its_delay(monkeypatch):
    fake = FakeTty()
    monkeypatch.setattr("sys.stderr", fake)
    bar = ProgressBar(delay_s=0.0)
    bar(512, 1024)
    bar.close()
    assert "512/1024 instructions" in fake.getvalue() and fake.getvalue().endswith("\n")
    quiet = FakeTty()
    monkeypatch.setattr("sys.stderr", quiet)
    slow = ProgressBar(delay_s=60.0)
    slow(512, 1024)
    slow.close()
    assert quiet.getvalue() == ""


def test_progress_is_silent_when_stderr_is_not_a_tty(capsys):
    prog = matmul_program("bf16")
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((2 * K, N)).astype(ml_dtypes.bfloat16),
              "w": rng.standard_normal((2 * K, M)).astype(ml_dtypes.bfloat16),
              "b": np.zeros((M, 1), np.float32)}
    run_program(prog, inputs, progress=True)
    assert capsys.readouterr().err == ""
