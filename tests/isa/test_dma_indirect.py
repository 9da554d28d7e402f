"""dma_indirect: text and .neff round trips, numerics (gather, scatter, rmw add, oob), rules, checked mode, cost."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from isa import neff
from isa.asm import parse_program, print_program
from isa.emulator import run_program
from isa.errors import IndirectIndexError, RaceError, RuleViolation, UninitializedReadError

HEAD = """.target trn1
.tensor table input f32 [10,4]
.tensor ids input i32 [5]
.tensor out output f32 [5,4]
"""
LOAD_IDS = "sp.dma dst=sbuf[0:5]@0[1,1]:i32 src=hbm:ids@0[1,5][1,1]:i32 queue=0 signal(s0)\n"
GATHER = (HEAD + LOAD_IDS
          + "sp.dma_indirect dst=sbuf[0:5]@64[1,4]:f32 src=hbm:table@0[4,5][1,4]:f32 index=sbuf[0:5]@0[1,1]:i32 "
            "queue=1 {attrs} wait(s0>=1) signal(s1)\n"
          + "sp.dma dst=hbm:out@0[4,5][1,4]:f32 src=sbuf[0:5]@64[1,4]:f32 queue=2 wait(s1>=1)\n")
TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)


def gather(ids: list[int], attrs: str = "", **kw) -> np.ndarray:
    program = parse_program(GATHER.format(attrs=attrs))
    return run_program(program, {"table": TABLE, "ids": np.array(ids, dtype=np.int32)}, **kw).outputs["out"]


def test_text_and_neff_round_trip():
    program = parse_program(GATHER.format(attrs="side=src oob=skip"))
    text = print_program(program)
    assert "sp.dma_indirect" in text and "oob=skip" in text and "index=sbuf[0:5]@0[1,1]:i32" in text
    assert print_program(parse_program(text)) == text
    assert print_program(neff.decode(neff.encode(program))) == text


def test_gather_rows_by_index_checked():
    ids = [3, 0, 9, 3, 1]
    np.testing.assert_array_equal(gather(ids, check=True), TABLE[ids])


def test_out_of_range_error_and_skip():
    with pytest.raises(IndirectIndexError, match="index 10 at partition 2"):
        gather([3, 0, 10, 3, 1])
    with pytest.raises(IndirectIndexError, match="index -1"):
        gather([-1, 0, 1, 2, 3])
    got = gather([3, -1, 10, 2, 1], "oob=skip")
    np.testing.assert_array_equal(got[[0, 3, 4]], TABLE[[3, 2, 1]])
    np.testing.assert_array_equal(got[[1, 2]], 0)  # skipped rows leave the SBUF tile as it was (zeros)


def test_skipped_row_is_an_uninitialized_read_in_checked_mode():
    with pytest.raises(UninitializedReadError):
        gather([3, -1, 2, 2, 1], "oob=skip", check=True)


def test_a_gather_then_a_scatter_in_one_program():
    """Two dma_indirect of one operand layout, one indexing its src and one its dst: decode finds the side of
    each (an attribute), not once per operand layout."""
    scatter_back = ("sp.dma_indirect dst=hbm:out@0[4,5][1,4]:f32 src=sbuf[0:5]@64[1,4]:f32 index=sbuf[0:5]@0[1,1]:i32 "
                    "queue=3 side=dst wait(s1>=1)\n")
    text = GATHER.format(attrs="side=src").replace("queue=2 wait(s1>=1)", "queue=2 wait(s1>=1) signal(s2)")
    text = text.replace(".tensor out output f32 [5,4]", ".tensor out output f32 [10,4]") + scatter_back.replace(
        "wait(s1>=1)", "wait(s2>=1)")
    ids = np.array([3, 0, 9, 4, 1], dtype=np.int32)
    for checks in ("off", "rules", "full"):
        got = run_program(parse_program(text), {"table": TABLE, "ids": ids}, checks=checks).outputs["out"]
        expected = np.zeros((10, 4), np.float32)
        expected[:5] = TABLE[ids]  # the gathered rows, copied out
        expected[ids] = TABLE[ids]  # and scattered back to their own rows
        np.testing.assert_array_equal(got, expected)


def scatter(dtype: str, rows: int, ids: list[int], updates: np.ndarray, attrs: str) -> np.ndarray:
    n = len(ids)
    text = f""".target trn1
.tensor base input {dtype} [{rows},3]
.tensor ids input i32 [{n}]
.tensor upd input {dtype} [{n},3]
.tensor out output {dtype} [{rows},3]
sp.dma dst=hbm:out@0[3,{rows}][1,3]:{dtype} src=hbm:base@0[3,{rows}][1,3]:{dtype} queue=0 signal(s0)
sp.dma dst=sbuf[0:{n}]@0[1,1]:i32 src=hbm:ids@0[1,{n}][1,1]:i32 queue=1 signal(s1)
sp.dma dst=sbuf[0:{n}]@64[1,3]:{dtype} src=hbm:upd@0[3,{n}][1,3]:{dtype} queue=2 signal(s2)
sp.dma_indirect dst=hbm:out@0[3,{n}][1,3]:{dtype} src=sbuf[0:{n}]@64[1,3]:{dtype} index=sbuf[0:{n}]@0[1,1]:i32 \
queue=3 side=dst {attrs} wait(s0>=1,s1>=1,s2>=1)
"""
    numpy = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "i32": np.int32}[dtype]
    base = np.arange(rows * 3).reshape(rows, 3).astype(numpy)
    inputs = {"base": base, "ids": np.array(ids, dtype=np.int32), "upd": updates.astype(numpy)}
    return run_program(parse_program(text), inputs, check=True).outputs["out"]


def test_scatter_add_accumulates_repeats_in_order_and_skips():
    upd = np.arange(12).reshape(4, 3) + 100
    got = scatter("i32", 6, [1, 4, 1, 7], upd, "oob=skip rmw=add")
    want = np.arange(18).reshape(6, 3)
    want[1] += upd[0] + upd[2]
    want[4] += upd[1]
    np.testing.assert_array_equal(got, want)


def test_scatter_replace_last_wins_bf16():
    upd = np.arange(12).reshape(4, 3) * 0.5
    got = scatter("bf16", 5, [2, 0, 2, -3], upd, "oob=skip")
    want = np.arange(15).reshape(5, 3).astype(np.float32)
    want[2], want[0] = upd[2], upd[1]
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_scatter_add_rounds_in_the_destination_type():
    upd = np.full((3, 3), 1.0 / 3.0)
    got = scatter("bf16", 2, [0, 0, 0], upd, "rmw=add")
    third = np.float32(ml_dtypes.bfloat16(1 / 3))
    acc = np.arange(3, dtype=np.float32)  # row 0 of the base
    for _ in range(3):  # one rounding to bf16 per added row
        acc = (acc + third).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(got[0].astype(np.float32), acc)


@pytest.mark.parametrize("change, rule", [
    ("index=sbuf[0:5]@0[1,1]:f32", "index tile must be an integer"),
    ("index=sbuf[0:4]@0[1,1]:i32", "index must be"),
    ("src=sbuf[0:5]@256[1,4]:f32", "must be in HBM"),
    ("rmw=add", "rmw needs side=dst"),
    ("src=hbm:table@0[0,5][1,4]:f32", "row scale"),
    ("src=hbm:table@2[4,5][1,4]:f32", "whole number"),
])
def test_rule_violations(change, rule):
    name = change.split("=")[0]
    line = [line for line in GATHER.format(attrs="").splitlines() if "dma_indirect" in line][0]
    fields = [f for f in line.split() if not f.startswith(f"{name}=")]
    fields.insert(1, change)
    program = parse_program(GATHER.format(attrs="").replace(line, " ".join(fields)))
    with pytest.raises(RuleViolation, match=rule):
        run_program(program, {"table": TABLE, "ids": np.zeros(5, dtype=np.int32)})


def test_unwritten_index_tile_is_reported():
    text = GATHER.format(attrs="").replace("@0[1,1]:i32 queue=1", "@512[1,1]:i32 queue=1")
    with pytest.raises(UninitializedReadError):
        run_program(parse_program(text), {"table": TABLE, "ids": np.zeros(5, dtype=np.int32)}, check=True)


RACE = """.target trn1
.tensor t input f32 [16,4]
.tensor ids input i32 [2]
.tensor out output f32 [16,4]
.tensor out2 output f32 [1,4]
sp.dma dst=hbm:out@0[4,16][1,4]:f32 src=hbm:t@0[4,16][1,4]:f32 queue=0 signal(s0)
sp.dma dst=sbuf[0:2]@0[1,1]:i32 src=hbm:ids@0[1,2][1,1]:i32 queue=1 signal(s1)
sp.dma dst=sbuf[0:2]@64[1,4]:f32 src=hbm:t@0[4,2][1,4]:f32 queue=2 signal(s2)
sp.dma_indirect dst=hbm:out@0[4,2][1,4]:f32 src=sbuf[0:2]@64[1,4]:f32 index=sbuf[0:2]@0[1,1]:i32 queue=3 side=dst \
wait(s0>=1,s1>=1,s2>=1)
sp.dma dst=hbm:out2@0[4,1][1,4]:f32 src=hbm:out@48[4,1][1,4]:f32 queue=4 wait(s0>=1)
"""


def test_races_are_checked_on_the_rows_actually_touched():
    inputs = {"t": np.ones((16, 4), np.float32)}
    # the last DMA reads row 3 of out, unordered with the scatter: a race only if the scatter writes row 3
    run_program(parse_program(RACE), {**inputs, "ids": np.array([0, 9], np.int32)}, check=True)
    with pytest.raises(RaceError, match="dma_indirect"):
        run_program(parse_program(RACE), {**inputs, "ids": np.array([0, 3], np.int32)}, check=True)


def transfer_us(rows: int, row_elems: int) -> float:
    text = f""".target trn1
.tensor t input f32 [{rows * 4},{row_elems}]
.tensor ids input i32 [{rows}]
.tensor out output f32 [{rows},{row_elems}]
sp.dma dst=sbuf[0:{rows}]@0[1,1]:i32 src=hbm:ids@0[1,{rows}][1,1]:i32 queue=0 signal(s0)
sp.dma_indirect dst=hbm:out@0[{row_elems},{rows}][1,{row_elems}]:f32 \
src=hbm:t@0[{row_elems},{rows}][1,{row_elems}]:f32 index=sbuf[0:{rows}]@0[1,1]:i32 queue=1 wait(s0>=1)
"""
    inputs = {"t": np.zeros((rows * 4, row_elems), np.float32), "ids": np.arange(rows, dtype=np.int32) * 3}
    return run_program(parse_program(text), inputs).profile.time_us


def test_cost_is_per_row_descriptor():
    # the same 64 KiB as 128 rows of 512 B or 16 rows of 4 KiB: the small rows pay 8x the descriptors
    small, large = transfer_us(128, 128), transfer_us(16, 1024)
    assert small > large * 1.2
    # fixed cost + bytes: gathering 16x more rows of one element costs far less than 16x
    assert transfer_us(128, 1) < 4 * transfer_us(8, 1)
