"""Control flow in the ISA: registers, labels, branch/jump/loop, register waits, semaphore resets; text and .neff
round trips; emulator semantics (trip counts, nested loops, branches on SBUF data), rule checks (runaway loops,
unwritten registers, unknown labels) and the race detector across iterations."""

from __future__ import annotations

import numpy as np
import pytest

from isa import neff
from isa.asm import parse_program, print_program
from isa.emulator import Emulator, run_program
from isa.emulator.control import LoopLimitError, register_value
from isa.errors import ProgramError, RaceError, RuleViolation
from isa.target import Target, load_target

HEAD = """.target trn1
.tensor in0 input f32 [4,8]
.tensor out0 output f32 [4,8]
"""
LOAD = "sp.dma dst=sbuf[0:4]@0[1,8]:f32 src=hbm:in0@0[8,4][1,8]:f32 queue=0 signal(s5)\n"
STORE = "sp.dma dst=hbm:out0@0[8,4][1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 queue=0 wait(s2>=1)\n"
X = np.arange(32, dtype=np.float32).reshape(4, 8)


def counted(trips: int) -> str:
    """DVE adds 1 to a tile `trips` times in a counted loop; SP stores it afterwards."""
    return (HEAD + LOAD + f"dve.reg_set reg=0 value={trips}\n"
            "top: dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=1.0 "
            "wait(s5>=1)\n"
            "dve.loop reg=0 target=\"top\"\n"
            "dve.nop signal(s2)\n" + STORE)


def run(text: str, check: bool = True, target: Target | None = None) -> np.ndarray:
    return run_program(parse_program(text), {"in0": X}, check=check, target=target).outputs["out0"]


def test_text_and_neff_round_trip_keep_labels() -> None:
    text = print_program(parse_program(counted(3)))
    assert 'top: dve.tensor_scalar' in text and 'dve.loop reg=0 target="top"' in text
    program = parse_program(text)
    assert print_program(program) == text
    back = neff.decode(neff.encode(program))
    assert print_program(back) == text
    assert [i.label for i in back.instructions if i.label] == ["top"]


def test_counted_loop_runs_its_trips_and_the_program_stays_one_body() -> None:
    np.testing.assert_array_equal(run(counted(300)), X + 300)
    assert len(parse_program(counted(300)).instructions) == len(parse_program(counted(3)).instructions)
    result = run_program(parse_program(counted(300)), {"in0": X})
    counts = result.profile.instruction_counts
    assert counts["dve.tensor_scalar"] == 300 and counts["dve.loop"] == 300


def test_nested_loops_multiply_their_trip_counts() -> None:
    text = (HEAD + LOAD + "dve.reg_set reg=0 value=4\n"
            "outer: dve.reg_set reg=1 value=5\n"
            "inner: dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=1.0 "
            "wait(s5>=1)\n"
            "dve.loop reg=1 target=\"inner\"\n"
            "dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=multiply scalar=2.0\n"
            "dve.loop reg=0 target=\"outer\"\n"
            "dve.nop signal(s2)\n" + STORE)
    expected = X.copy()
    for _ in range(4):
        expected = (expected + 5) * 2
    np.testing.assert_array_equal(run(text), expected)


def branch_program(flag: float) -> tuple[str, dict[str, np.ndarray]]:
    """Every stream reads a flag from SBUF (after the DMA that wrote it) and branches on it."""
    text = (".target trn1\n.tensor in0 input f32 [4,8]\n.tensor flag input f32 [1,1]\n"
            ".tensor out0 output f32 [4,8]\n" + LOAD +
            "sp.dma dst=sbuf[0:1]@64[1,1]:f32 src=hbm:flag@0[1,1][1,1]:f32 queue=1 signal(s6)\n"
            "dve.reg_load src=sbuf[0:1]@64[1,1]:f32 reg=3 wait(s6>=1)\n"
            "dve.branch reg=3 cmp=is_gt imm=0 target=\"positive\"\n"
            "dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=multiply scalar=-1.0 "
            "wait(s5>=1)\n"
            "dve.jump target=\"done\"\n"
            "positive: dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=10.0 "
            "wait(s5>=1)\n"
            "done: dve.nop signal(s2)\n" + STORE)
    return text, {"in0": X, "flag": np.full((1, 1), flag, np.float32)}


@pytest.mark.parametrize("flag,expected", [(2.7, X + 10), (-3.0, -X), (0.5, -X)])
def test_branch_on_a_value_read_from_sbuf(flag: float, expected: np.ndarray) -> None:
    text, feeds = branch_program(flag)
    emulator = Emulator(parse_program(text), checks="full")
    np.testing.assert_array_equal(emulator.run(feeds).outputs["out0"], expected)
    # a second run on other data takes the other path: programs with branches are never replayed
    np.testing.assert_array_equal(emulator.run({**feeds, "flag": -feeds["flag"] - 1}).outputs["out0"],
                                  -X if flag > 0 else X + 10)


def test_register_arithmetic_and_reads_of_sbuf_follow_int32_rules() -> None:
    assert register_value(np.float32(-2.9), "f32") == -2 and register_value(np.float32(np.nan), "f32") == 0
    assert register_value(np.float32(1e20), "f32") == 2**31 - 1
    assert register_value(np.uint32(2**32 - 1), "u32") == -1 and register_value(np.bool_(True), "pred") == 1
    # r0 = 7 * 6 - 2 = 40 > 39: the branch is taken, 40 trips of +1
    text = (HEAD + LOAD + "dve.reg_set reg=0 value=7\n"
            "dve.reg_op reg=0 a=0 op=multiply imm=6\n"
            "dve.reg_op reg=0 a=0 op=subtract imm=2\n"
            "top: dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=1.0 "
            "wait(s5>=1)\n"
            "dve.loop reg=0 target=\"top\"\n"
            "dve.nop signal(s2)\n" + STORE)
    np.testing.assert_array_equal(run(text), X + 40)


def test_a_runaway_loop_is_an_error() -> None:
    data = load_target("trn1").data
    target = Target("trn1", {**data, "control": {**data["control"], "max_trips": 50}})
    text = HEAD + "dve.reg_set reg=0 value=1\nspin: dve.nop\ndve.branch reg=0 cmp=is_equal imm=1 target=\"spin\"\n"
    with pytest.raises(LoopLimitError, match="runaway loop"):
        run(text, target=target)
    run(counted(50), target=target)  # 49 backward branches: within the limit


def test_reading_a_register_nothing_wrote_is_an_error() -> None:
    with pytest.raises(ProgramError, match="reads register r4 of dve, which nothing wrote"):
        run(HEAD + "top: dve.nop\ndve.loop reg=4 target=\"top\"\n")


def test_static_rules_of_control_flow() -> None:
    with pytest.raises(ProgramError, match="labels no act instruction"):
        run(HEAD + "top: dve.nop\nact.jump target=\"top\"\n")
    with pytest.raises(RuleViolation, match="register r16 out of range"):
        run(HEAD + "dve.reg_set reg=16 value=0\n")
    with pytest.raises(RuleViolation, match="semaphores 250..259 out of range"):
        run(HEAD + "sp.sem_reset first=250 count=10\n")


def body_with_waits(growing: bool) -> str:
    """A 3-trip loop: ACT copies tile A to B, then DVE adds 1 to A. Each DVE write must wait for that trip's ACT
    read, and each ACT read for the previous trip's DVE write. With constant waits (`s1>=1`) only the first trip
    is ordered; with register waits (`sem_wait`, the register counting trips) every trip is."""
    act_wait = "act.sem_wait sem=3 reg=1 imm=0\n" if growing else "act.nop\n"
    dve_wait = "dve.sem_wait sem=1 reg=1 imm=0\n" if growing else "dve.nop wait(s1>=1)\n"
    return (HEAD + LOAD + "act.reg_set reg=0 value=3\ndve.reg_set reg=0 value=3\n"
            "act.reg_set reg=1 value=-1\ndve.reg_set reg=1 value=0\n"
            "a: act.reg_op reg=1 a=1 op=add imm=1\n" + act_wait +
            "act.activation dst=sbuf[0:4]@128[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 func=copy scale=1.0 "
            "wait(s5>=1) signal(s1)\n"
            "act.loop reg=0 target=\"a\"\n"
            "d: dve.reg_op reg=1 a=1 op=add imm=1\n" + dve_wait +
            "dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=1.0 wait(s5>=1) "
            "signal(s3)\n"
            "dve.loop reg=0 target=\"d\"\n"
            "dve.nop signal(s2)\n" + STORE)


def test_race_detector_sees_unordered_accesses_of_different_iterations() -> None:
    with pytest.raises(RaceError, match="no semaphore chain"):
        run(body_with_waits(growing=False))
    np.testing.assert_array_equal(run(body_with_waits(growing=True)), X + 3)


def test_sem_reset_restarts_the_counts_of_waits() -> None:
    """After a reset, a wait for s7>=1 needs a new signal: PE signals once before and once after the reset."""
    text = (HEAD + LOAD + "pe.nop signal(s7)\n"
            "sp.sem_reset first=7 count=1 wait(s7>=1) signal(s8)\n"
            "pe.nop wait(s8>=1) signal(s7)\n"
            "dve.nop wait(s8>=1)\n"
            "dve.nop wait(s7>=1) signal(s9)\n"
            "dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=1.0 wait(s5>=1)\n"
            "dve.nop signal(s2)\n" + STORE)
    result = run_program(parse_program(text), {"in0": X}, check=True)
    np.testing.assert_array_equal(result.outputs["out0"], X + 1)
    spans = sorted((s for s in result.profile.spans if s.name in ("pe.nop", "dve.nop")), key=lambda s: s.index)
    second_pe = [s for s in spans if s.name == "pe.nop"][1]
    waiting = [s for s in spans if s.name == "dve.nop"][1]
    # DVE waited for PE's signal after the reset (s7 counts from 0 again), not the one before
    assert waiting.start_ns >= second_pe.start_ns + second_pe.dur_ns
