"""The emulator's fast paths give the results of the full one, bit for bit: checks off, rules and
full; a decoded program run again (replayed); against fingerprints stored before these paths
existed (tests/isa/emulator_fingerprint.py)."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest

from isa.emulator import CHECKS, Emulator, run_program
from isa.errors import InputError, RuleViolation
from isa.neff import load
from tests.isa.emulator_fingerprint import DATA, FINGERPRINTS, MODELS, fingerprint, inputs
from tests.isa.emulator_helpers import hb, ins, program, sb

STORED = json.loads(FINGERPRINTS.read_text())


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("checks", CHECKS)
def test_checks_levels_match_stored_behaviour(name, checks):
    prog = load(DATA / f"{name}.neff")
    result = run_program(prog, inputs(prog), checks=checks)
    assert fingerprint(result.outputs, result.profile) == STORED[name]


@pytest.mark.parametrize("name", list(MODELS))
def test_replayed_runs_match_stored_behaviour(name):
    prog = load(DATA / f"{name}.neff")
    emulator = Emulator(prog, checks="off")
    other = inputs(prog, seed=5)
    first = emulator.run(other)  # scheduled; then replays with other data in between
    for _ in range(2):
        again = emulator.run(inputs(prog))
        assert fingerprint(again.outputs, again.profile) == STORED[name]
    last = emulator.run(other)
    for key in first.outputs:
        np.testing.assert_array_equal(first.outputs[key], last.outputs[key])


def test_constants_are_not_copied_and_stay_intact():
    prog = load(DATA / "mlp.neff")
    emulator = Emulator(prog)
    name = next(n for n, d in prog.tensors.items() if d.kind == "const")
    before = np.array(prog.constants[name], copy=True)
    assert np.shares_memory(emulator.memory.hbm[name], prog.constants[name])
    emulator.run(inputs(prog))
    np.testing.assert_array_equal(prog.constants[name], before)


def _bad_partition_program():
    # 40 partitions starting at partition 32 break the start-partition rule (0 or 64 for 33-64)
    return program([], [ins("dve", "memset", dst=sb(32, 72, 0, [[1, 8]]), value=1.0)])


def test_checks_off_skips_the_machine_rules_and_rules_keeps_them():
    prog = _bad_partition_program()
    with pytest.raises(RuleViolation):
        run_program(prog, {})
    run_program(prog, {}, checks="off")


def test_checks_level_is_validated():
    prog = load(DATA / "mlp.neff")
    with pytest.raises(InputError, match="checks must be one of"):
        run_program(prog, inputs(prog), checks="some")
    with pytest.raises(InputError, match="check=True"):
        run_program(prog, inputs(prog), check=True, checks="off")


# programs with control flow ------------------------------------------------------------------------------------

def _loop_program(trips: int):
    """DVE adds 1 to a tile `trips` times in a counted loop (tests/isa/test_control.py's shape)."""
    from isa.asm import parse_program
    return parse_program(
        ".target trn1\n.tensor in0 input f32 [4,8]\n.tensor out0 output f32 [4,8]\n"
        "sp.dma dst=sbuf[0:4]@0[1,8]:f32 src=hbm:in0@0[8,4][1,8]:f32 queue=0 signal(s5)\n"
        f"dve.reg_set reg=0 value={trips}\n"
        "top: dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=1.0 wait(s5>=1)\n"
        "dve.loop reg=0 target=\"top\"\n"
        "dve.nop signal(s2)\n"
        "sp.dma dst=hbm:out0@0[8,4][1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 queue=0 wait(s2>=1)\n")


def test_loops_without_data_dependent_branches_are_replayed(monkeypatch):
    import isa.emulator as emulator_module
    prog = _loop_program(50)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    emulator = Emulator(prog, checks="off")
    first = emulator.run({"in0": x})
    assert not emulator.data_dependent and first.profile.instruction_counts["dve.tensor_scalar"] == 50

    def no_scheduling(*args, **kwargs):
        raise AssertionError("a replayable program was scheduled again")

    monkeypatch.setattr(emulator_module, "ControlScheduler", no_scheduling)
    again = emulator.run({"in0": -x})  # replayed: other data, same order
    np.testing.assert_array_equal(again.outputs["out0"], -x + 50)
    assert again.profile.time_us == first.profile.time_us
    timeline = fingerprint(first.outputs, first.profile)["timeline"]
    assert fingerprint(again.outputs, again.profile)["timeline"] == timeline
    # the full checks still schedule every run (the race detector watches the schedule)
    monkeypatch.undo()
    checked = Emulator(prog, checks="full")
    checked.run({"in0": x})
    monkeypatch.setattr(emulator_module, "ControlScheduler", no_scheduling)
    with pytest.raises(AssertionError, match="scheduled again"):
        checked.run({"in0": x})


def test_programs_branching_on_data_are_scheduled_every_run():
    from isa.asm import parse_program
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    prog = parse_program(
        ".target trn1\n.tensor in0 input f32 [4,8]\n.tensor flag input f32 [1,1]\n.tensor out0 output f32 [4,8]\n"
        "sp.dma dst=sbuf[0:4]@0[1,8]:f32 src=hbm:in0@0[8,4][1,8]:f32 queue=0 signal(s5)\n"
        "sp.dma dst=sbuf[0:1]@64[1,1]:f32 src=hbm:flag@0[1,1][1,1]:f32 queue=1 signal(s6)\n"
        "dve.reg_load src=sbuf[0:1]@64[1,1]:f32 reg=3 wait(s6>=1)\n"
        "dve.branch reg=3 cmp=is_gt imm=0 target=\"positive\"\n"
        "dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=multiply scalar=-1.0 wait(s5>=1)\n"
        "dve.jump target=\"done\"\n"
        "positive: dve.tensor_scalar dst=sbuf[0:4]@0[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 op=add scalar=10.0 "
        "wait(s5>=1)\n"
        "done: dve.nop signal(s2)\n"
        "sp.dma dst=hbm:out0@0[8,4][1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 queue=0 wait(s2>=1)\n")
    emulator = Emulator(prog, checks="off")
    assert emulator.data_dependent
    np.testing.assert_array_equal(emulator.run({"in0": x, "flag": np.full((1, 1), 2.0, np.float32)}).outputs["out0"],
                                  x + 10)
    np.testing.assert_array_equal(emulator.run({"in0": x, "flag": np.full((1, 1), -2.0, np.float32)}).outputs["out0"],
                                  -x)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_of_a_loop_never_passes_its_total(monkeypatch):
    import isa.emulator as emulator_module
    fake = _Tty()
    monkeypatch.setattr("sys.stderr", fake)
    monkeypatch.setattr(emulator_module.ProgressBar.__init__, "__defaults__", (0.0,))
    x = np.zeros((4, 8), np.float32)
    emulator = Emulator(_loop_program(3000), checks="off")
    emulator.run({"in0": x}, progress=True)  # scheduled: the count is not known before the end
    scheduled = fake.getvalue()
    assert "instructions (with loops)" in scheduled and "/" not in scheduled.replace("/s", "")
    emulator.run({"in0": x}, progress=True)  # replayed: the count is known
    fractions = re.findall(r"(\d+)/(\d+) instructions", fake.getvalue()[len(scheduled):])
    assert fractions and all(int(done) <= int(total) for done, total in fractions)
    bar = emulator_module.ProgressBar(delay_s=0.0)
    bar(2048, 1024)  # never more than the whole bar
    assert "#" * 41 not in fake.getvalue()


def _special_f32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values mixed with NaNs of random sign and payload, infinities, zeros of both signs, subnormals."""
    n = int(np.prod(shape))
    nans = (rng.integers(0, 1 << 22, n, dtype=np.uint32) | np.uint32(0x7F800001)
            | (rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31))).view(np.float32)
    specials = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 3.4e38], np.float32)
    values = rng.standard_normal(n).astype(np.float32)
    pick = rng.random(n)
    values = np.where(pick < 0.3, nans, values)
    values = np.where((pick >= 0.3) & (pick < 0.45), specials[rng.integers(0, len(specials), n)], values)
    return values.reshape(shape)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_exact_fp32_ops_on_views_give_the_bits_of_the_fp32_copies(op):
    """tensor_tensor / tensor_scalar of EXACT_F32 ops run on strided and broadcast views: the same bits (NaN
    payloads and signs included) as computing on contiguous fp32 copies and storing."""
    from isa.emulator.kernels import EXACT_F32, Ctx, EngineState, _tensor_scalar, _tensor_tensor
    from isa.emulator.numerics import ALU, make_store, read_f32
    from isa.program import Instruction
    rng = np.random.default_rng(7)
    base = _special_f32(rng, (8, 6, 40))
    a = base[:, :, ::2]  # strided
    b = np.broadcast_to(_special_f32(rng, (8, 6, 1)), (8, 6, 20))  # broadcast along the free dims
    c = np.broadcast_to(_special_f32(rng, (8, 1, 20)), (8, 6, 20))
    store = make_store("f32")
    for x, y in ((a, b), (b, c), (c, a)):
        expected = np.empty((8, 6, 20), np.float32)
        store(expected, ALU[op][1](read_f32(x), read_f32(y)))
        dst = np.zeros((8, 6, 40), np.float32)[:, :, 1::2]
        inst = Instruction("dve", "tensor_tensor", {}, {"op": op})
        run = _tensor_tensor(Ctx(inst, {"dst": dst, "a": x, "b": y}, EngineState(8)))
        assert op in EXACT_F32
        run()
        np.testing.assert_array_equal(dst.view(np.uint32), expected.view(np.uint32))
    for s0, s1 in ((1.5, -0.0), (-3.0, 1e-45), (np.inf, 2.0)):
        expected = np.empty((8, 6, 20), np.float32)
        store(expected, np.subtract(ALU[op][1](read_f32(a), np.float32(s0)), np.float32(s1)))
        dst = np.zeros((8, 6, 20), np.float32)
        inst = Instruction("pool", "tensor_scalar", {}, {"op": op, "scalar": s0, "op1": "subtract", "scalar1": s1})
        _tensor_scalar(Ctx(inst, {"dst": dst, "src": a}, EngineState(8)))()
        np.testing.assert_array_equal(dst.view(np.uint32), expected.view(np.uint32))


# the scheduler's shortcuts (DMA triggers without START/DONE events, no DONE for instructions that signal nothing)
# against its event-by-event path ---------------------------------------------------------------------------------

def _schedule(prog, direct: bool):
    from isa.emulator.scheduler import Scheduler
    emulator = Emulator(prog)  # rules checked
    emulator.memory.load_inputs(inputs(prog))
    scheduler = Scheduler(emulator.ops, emulator.target)
    # the shortcuts with the numerics run after the schedule (as Emulator runs them), or every event with the
    # numerics at each instruction's start
    scheduler.direct = scheduler.defer = direct
    timeline = scheduler.run()
    if direct:
        for run in scheduler.executed:
            run()
    order = [next(op.index for op in emulator.ops if op.run is run) for run in scheduler.executed]
    outputs = {name: emulator.memory.read_tensor(name) for name in prog.outputs}
    stalls = {engine: dict(by) for engine, by in timeline.stalls.items() if by}
    return (timeline.start, timeline.end, timeline.transfer_start, timeline.transfer_end, stalls,
            dict(timeline.increments), repr(timeline.time_ns), order), outputs


def _triggers_program():
    """Runs of DMA triggers that wait on nothing between ones that wait, a trigger that waits on a compute result
    made while the run before it is still being triggered, and a last instruction that signals nothing and ends
    after every transfer (the run's end is its end)."""
    row = [[1, 64]]
    loads = [ins("sp", "dma", dst=sb(0, 128, 256 * k, row), src=hb("x", 256 * k, [[768, 128], [1, 64]]),
                 queue=k % 16, signals=[0] if k == 0 else []) for k in range(12)]
    body = [
        ins("act", "activation", dst=sb(0, 128, 8192, row), src=sb(0, 128, 0, row), func="exp", waits=[(0, 1)],
            signals=[1]),
        *loads[1:6],
        ins("sp", "dma", dst=hb("y", 0, [[64, 128], [1, 64]]), src=sb(0, 128, 8192, row), queue=3, waits=[(1, 1)],
            signals=[2]),
        *loads[6:],
        ins("dve", "memset", dst=sb(0, 128, 16384, [[1, 2048]]), value=1.0, waits=[(2, 1)]),
    ]
    return program([("x", "input", "f32", (128, 768)), ("y", "output", "f32", (128, 64))],
                   [loads[0], *body])


@pytest.mark.parametrize("name", [*MODELS, "triggers"])
def test_scheduler_shortcuts_change_no_time_and_no_order(name):
    prog = _triggers_program() if name == "triggers" else load(DATA / f"{name}.neff")
    (fast, fast_out), (slow, slow_out) = _schedule(prog, True), _schedule(prog, False)
    assert fast == slow
    for key in slow_out:
        np.testing.assert_array_equal(fast_out[key], slow_out[key])


@pytest.mark.parametrize("side", ["hbm", "sbuf"])
def test_operands_of_a_checked_geometry_still_have_their_bounds_checked(side):
    """Rule checks run once per operand geometry (all but the offset); each offset's bounds are still checked."""
    def load(offset: int):
        if side == "hbm":
            return ins("sp", "dma", dst=sb(0, 4, 0, [[1, 8]]), src=hb("x", offset, [[8, 4], [1, 8]]), queue=0)
        return ins("sp", "dma", dst=sb(0, 4, offset, [[1, 8]]), src=hb("x", 0, [[8, 4], [1, 8]]), queue=0)

    last = 4 * 8 * 4 if side == "hbm" else 192 * 1024  # the tensor's bytes, SBUF's bytes per partition
    fine = program([("x", "input", "f32", (4, 8))], [load(0), load(0 if side == "hbm" else last - 32)])
    run_program(fine, {"x": np.zeros((4, 8), np.float32)})
    bad = program([("x", "input", "f32", (4, 8))], [load(0), load(0), load(4 if side == "hbm" else last - 28)])
    where = "HBM tensor x" if side == "hbm" else "the sbuf partition"
    with pytest.raises(RuleViolation, match=rf"instruction #2 sp.dma: operand (src|dst): access outside {where}: "
                                            rf"bytes \[\d+, {last + 4}\)"):
        run_program(bad, {"x": np.zeros((4, 8), np.float32)})
