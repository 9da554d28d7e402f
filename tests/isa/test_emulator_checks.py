"""Rule violations at decode, deadlocks, and checked mode (uninitialized reads, races)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.emulator import checks, run_program
from isa.errors import DeadlockError, ProgramError, RaceError, RuleViolation, UninitializedReadError
from isa.target import Target, load_target
from tests.isa.emulator_helpers import hb, ins, program, ps, sb

TENSORS = [("x", "input", "f32", (128, 64)), ("y", "output", "f32", (128, 64))]


def run(insts, target=None, check=False, tensors=TENSORS):
    prog = program(tensors, insts)
    return run_program(prog, {"x": np.ones((128, 64), np.float32)}, target=target, check=check)


def small_k_target() -> Target:
    data = copy.deepcopy(load_target("trn1").data)
    data["pe"]["max_k"] = 64
    return Target("trn1-small-k", data)


STAT = sb(0, 128, 0, [[1, 64]], "bf16")
RULES = [
    ("start partition", [ins("dve", "memset", dst=sb(16, 48, 0, [[1, 8]]))],
     r"start partition rule: 32 partitions may start at \(0, 32, 64, 96\), not 16"),
    ("start partition 64", [ins("dve", "memset", dst=sb(32, 96, 0, [[1, 8]]))],
     r"64 partitions may start at \(0, 64\), not 32"),
    ("partition count", [ins("dve", "memset", dst=sb(0, 129, 0, [[1, 8]]))], "partition count over 128: 129"),
    ("sbuf offset", [ins("dve", "memset", dst=sb(0, 128, 196604, [[1, 2]]))],
     r"outside the sbuf partition: bytes \[196604, 196612\) of 196608"),
    ("psum offset", [ins("act", "tensor_copy", dst=ps(0, 128, 16380, [[1, 2]]),
                         src=sb(0, 128, 0, [[1, 2]]))], r"outside the psum partition.*of 16384"),
    ("psum bank", [ins("pe", "load_stationary", src=STAT),
                   ins("pe", "multiply_moving", dst=ps(0, 64, 2040, [[1, 4]]),
                       src=sb(0, 128, 0, [[1, 4]], "bf16"))],
     r"matmul dst crosses a PSUM bank: bytes \[2040, 2056\)"),
    ("stationary M", [ins("pe", "load_stationary", src=sb(0, 128, 0, [[1, 129]], "bf16"))],
     "stationary M over the limit: M=129 > 128"),
    ("moving N", [ins("pe", "load_stationary", src=STAT),
                  ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 513]]), src=sb(0, 128, 0, [[1, 513]], "bf16"))],
     "moving N over the limit: N=513 > 512"),
    ("K mismatch", [ins("pe", "load_stationary", src=STAT),
                    ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 8]]), src=sb(0, 64, 0, [[1, 8]], "bf16"))],
     "K of moving differs from K of stationary: 64 vs 128"),
    ("dst partitions", [ins("pe", "load_stationary", src=STAT),
                        ins("pe", "multiply_moving", dst=ps(0, 128, 0, [[1, 8]]),
                            src=sb(0, 128, 0, [[1, 8]], "bf16"))],
     "dst partitions must equal stationary M: 128 vs M=64"),
    ("no stationary", [ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]]))],
     "multiply_moving without a stationary tile"),
    ("PE reads SBUF only", [ins("pe", "load_stationary", src=ps(0, 128, 0, [[1, 64]]))],
     "operand src: load_stationary cannot access psum"),
    ("POOL no PSUM", [ins("pool", "tensor_copy", dst=sb(0, 128, 0, [[1, 8]]), src=ps(0, 128, 0, [[1, 8]]))],
     "operand src: engine pool cannot access psum"),
    ("engine", [ins("dve", "dma", dst=sb(0, 128, 0, [[1, 8]]), src=hb("x", 0, [[64, 128], [1, 8]]))],
     "dma cannot run on engine dve"),
    ("free size psum", [ins("dve", "tensor_copy", dst=sb(0, 128, 0, [[1, 4097]], "bf16"),
                            src=ps(0, 128, 0, [[1, 4097]], "bf16"))],
     "free size over the psum limit: 4097 elements > 4096"),
    ("free size sbuf", [ins("dve", "memset", dst=sb(0, 128, 0, [[1, 65537]], "bf16"))],
     "free size over the sbuf limit: 65537 elements > 65536"),
    ("hbm bounds", [ins("sp", "dma", dst=sb(0, 128, 0, [[1, 65]]), src=hb("x", 0, [[64, 128], [1, 65]]))],
     r"access outside HBM tensor x: bytes \[0, 32772\) of a 32768-byte tensor"),
    ("dtype", [ins("dve", "memset", dst=sb(0, 128, 0, [[1, 8]], "f64"))], "unknown dtype: 'f64'"),
    ("dma dtype", [ins("sp", "dma", dst=sb(0, 128, 0, [[1, 8]], "bf16"), src=hb("x", 0, [[64, 128], [1, 8]]))],
     "DMA sides differ in dtype: dst bf16, src f32"),
    ("dma shape", [ins("sp", "dma", dst=sb(0, 128, 0, [[1, 4]]), src=hb("x", 0, [[64, 128], [1, 8]]))],
     r"operands dst and src differ in shape: 128x4 vs 128x8"),
    ("dma queue", [ins("sp", "dma", dst=sb(0, 128, 0, [[1, 8]]), src=hb("x", 0, [[64, 128], [1, 8]]), queue=16)],
     "DMA queue out of range: queue 16, target has 16"),
    ("semaphore", [ins("dve", "nop", signals=[256])], "semaphore id out of range: id 256, target has 256"),
    ("bias shape", [ins("act", "activation", dst=sb(0, 128, 0, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]]),
                        bias=sb(0, 128, 64, [[1, 2]]))], r"bias must be a per-partition \[P, 1\] vector"),
    ("matmul dtype", [ins("pe", "load_stationary", src=STAT),
                      ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 8]], "bf16"),
                          src=sb(0, 128, 0, [[1, 8]], "bf16"))], "matmul dst must be f32"),
    ("free dims", [ins("dve", "memset", dst=sb(0, 128, 0, [[1, 1]] * 5))], "too many free dimensions: 5 > 4"),
    ("counts", [ins("dve", "memset", dst=sb(0, 128, 0, [[1, 0]]))],
     r"operand dst: counts must be >= 1: partitions 128, pattern \[\(1, 0\)\]"),
    ("partition range", [ins("sp", "dma", dst=sb(100, 140, 0, [[1, 8]]), src=hb("x", 0, [[64, 40], [1, 8]]))],
     r"operand dst: partitions out of range: \[100, 140\) of 128"),
    ("moving N vs dst", [ins("pe", "load_stationary", src=STAT),
                         ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 16]]),
                             src=sb(0, 128, 0, [[1, 8]], "bf16"))],
     "dst free size must equal moving N: 16 vs N=8"),
    ("PE floats only", [ins("pe", "load_stationary", src=sb(0, 128, 0, [[1, 64]], "i32"))],
     "operand src: PE operands must be floating point: i32; allowed: f32, bf16, f16, fp8e4, fp8e5"),
    ("PE moving floats only", [ins("pe", "load_stationary", src=STAT),
                               ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 8]]),
                                   src=sb(0, 128, 0, [[1, 8]], "i8"))], "PE operands must be floating point: i8"),
    # PE transpose
    ("transpose shape", [ins("pe", "transpose", dst=ps(0, 64, 0, [[1, 64]]), src=sb(0, 128, 0, [[1, 64]]))],
     r"transpose dst must be \[F, P\] of src \[P, F\]: dst 64x64, src 128x64"),
    ("transpose limit", [ins("pe", "transpose", dst=ps(0, 128, 0, [[1, 128]]), src=sb(0, 128, 0, [[1, 129]]))],
     r"transpose input over the limit: \[128, 129\] > \[128, 128\]"),
    ("transpose dtype", [ins("pe", "transpose", dst=ps(0, 64, 0, [[1, 128]], "bf16"),
                             src=sb(0, 128, 0, [[1, 64]], "f16"))],
     "transpose dst dtype must be f32 or the src dtype: dst bf16, src f16"),
    ("transpose bank", [ins("pe", "transpose", dst=ps(0, 64, 1600, [[1, 128]]), src=sb(0, 128, 0, [[1, 64]]))],
     r"transpose dst crosses a PSUM bank: bytes \[1600, 2112\), banks of 2048"),
    ("transpose reads SBUF", [ins("pe", "transpose", dst=ps(0, 64, 0, [[1, 128]]), src=ps(0, 128, 4096, [[1, 64]]))],
     "operand src: transpose cannot access psum"),
    # ACT accumulator
    ("acc shape", [ins("act", "activation", dst=sb(0, 128, 0, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]]),
                       acc=sb(0, 128, 64, [[1, 2]]), acc_cmd="reduce")],
     r"operand acc must be a per-partition \[P, 1\] vector: 128x2 for 128 partitions"),
    ("acc command", [ins("act", "activation", dst=sb(0, 128, 0, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]]),
                         acc=sb(0, 128, 64, [[1, 1]]))],
     "an acc operand needs acc_cmd reduce or reset_reduce: acc_cmd=idle"),
    # tensor_scalar vectors and chain
    ("scalar_vec shape", [ins("dve", "tensor_scalar", dst=sb(0, 64, 0, [[1, 8]]), src=sb(0, 64, 0, [[1, 8]]),
                              scalar_vec=sb(0, 32, 64, [[1, 1]]), op="add", scalar=0.0)],
     r"operand scalar_vec must be a per-partition \[P, 1\] vector: 32x1 for 64 partitions"),
    ("scalar1_vec needs op1", [ins("pool", "tensor_scalar", dst=sb(0, 64, 0, [[1, 8]]), src=sb(0, 64, 0, [[1, 8]]),
                                   scalar1_vec=sb(0, 64, 64, [[1, 1]]), op="add", scalar=0.0)],
     "operand scalar1_vec needs a second operation: op1=none"),
    # reductions
    ("reduce all", [ins("dve", "tensor_reduce", dst=sb(0, 128, 0, [[1, 2]]), src=sb(0, 128, 64, [[1, 8]]),
                        op="add")], r"reduce dst must be \[P, 1\] of the src partitions: dst 128x2"),
    ("reduce axes", [ins("dve", "tensor_reduce", dst=sb(0, 128, 0, [[1, 2]]), src=sb(0, 128, 64, [[4, 2], [1, 4]]),
                         op="max", axes="2")],
     r"bad reduce axes: axes='2' must name distinct free axes of src, 0..1 \(src has 2 free dimensions\)"),
    ("reduce axes words", [ins("dve", "tensor_reduce", dst=sb(0, 128, 0, [[1, 2]]),
                               src=sb(0, 128, 64, [[4, 2], [1, 4]]), op="max", axes="rows")],
     "bad reduce axes: axes='rows' is not 'all' or comma-separated integers"),
    ("reduce kept", [ins("dve", "tensor_reduce", dst=sb(0, 128, 0, [[1, 4]]), src=sb(0, 128, 64, [[4, 2], [1, 4]]),
                         op="min", axes="1")],
     "reduce dst must hold the src partitions x the kept elements: dst 128x4, src 128x2 kept"),
    ("partition_reduce free", [ins("pool", "partition_reduce", dst=sb(0, 1, 0, [[1, 4]]),
                                   src=sb(0, 128, 64, [[1, 8]]), op="add")],
     "partition_reduce dst must have the src free size: 4 vs 8"),
    ("partition_reduce psum", [ins("pool", "partition_reduce", dst=sb(0, 1, 0, [[1, 8]]),
                                   src=ps(0, 128, 64, [[1, 8]]), op="add")],
     "operand src: partition_reduce cannot access psum"),
    # DVE data movement and statistics
    ("select shape", [ins("dve", "select", dst=sb(0, 64, 0, [[1, 8]]), pred=sb(0, 64, 64, [[1, 4]]),
                          a=sb(0, 64, 128, [[1, 8]]), b=sb(0, 64, 192, [[1, 8]]))],
     "operands dst and pred differ in shape: 64x8 vs 64x4"),
    ("select pool psum", [ins("pool", "select", dst=sb(0, 64, 0, [[1, 8]]), pred=sb(0, 64, 64, [[1, 8]]),
                              a=ps(0, 64, 128, [[1, 8]]), b=sb(0, 64, 192, [[1, 8]]))],
     "operand a: engine pool cannot access psum"),
    ("select free size", [ins("dve", "select", dst=sb(0, 64, 0, [[1, 4097]], "i8"),
                              pred=sb(0, 64, 8192, [[1, 4097]], "i8"), a=ps(0, 64, 0, [[1, 4097]], "i8"),
                              b=sb(0, 64, 16384, [[1, 4097]], "i8"))],
     "operand a: free size over the psum limit: 4097 elements > 4096"),
    ("transpose32 blocks", [ins("dve", "transpose32", dst=sb(0, 64, 0, [[1, 40]]), src=sb(0, 64, 512, [[1, 40]]))],
     "transpose32 needs one block \\(P, F <= 32\\) or P and F multiples of 32: src 64x40"),
    ("transpose32 dst", [ins("dve", "transpose32", dst=sb(0, 32, 0, [[1, 16]]), src=sb(0, 32, 512, [[1, 16]]))],
     "transpose32 dst has the wrong shape: dst 32x16, expected 16x32 for src 32x16"),
    ("bn_stats free", [ins("dve", "bn_stats", dst=sb(0, 128, 0, [[1, 6]]), src=sb(0, 128, 64, [[1, 513]]))],
     "bn_stats free size over the limit: 513 elements > 512"),
    ("bn_stats dst", [ins("dve", "bn_stats", dst=sb(0, 128, 0, [[1, 4]]), src=sb(0, 128, 64, [[1, 64]]))],
     r"bn_stats dst must be \[P, 6\] of the src partitions: dst 128x4, src 128 partitions"),
    ("bn_aggr triples", [ins("dve", "bn_aggr", dst=sb(0, 128, 0, [[1, 2]]), src=sb(0, 128, 64, [[1, 7]]))],
     r"bn_aggr src must hold \(count, mean, variance \* count\) triples: 7 elements per partition"),
    ("bn_aggr dst", [ins("dve", "bn_aggr", dst=sb(0, 64, 0, [[1, 2]]), src=sb(0, 128, 64, [[1, 6]]))],
     r"bn_aggr dst must be \[P, 2\] of the src partitions: dst 64x2, src 128 partitions"),
    # POOL
    ("affine_select shape", [ins("pool", "affine_select", dst=sb(0, 32, 0, [[1, 8]]), src=sb(0, 64, 64, [[1, 8]]),
                                 fill=0.0)], "operands dst and src differ in shape: 32x8 vs 64x8"),
    ("affine_select psum", [ins("pool", "affine_select", dst=ps(0, 32, 0, [[1, 8]]), src=sb(0, 32, 64, [[1, 8]]),
                                fill=0.0)], "operand dst: affine_select cannot access psum"),
    ("iota pool psum", [ins("pool", "iota", dst=ps(0, 32, 0, [[1, 8]]))],
     "operand dst: engine pool cannot access psum"),
    ("iota start partition", [ins("dve", "iota", dst=ps(16, 48, 0, [[1, 8]]))],
     r"start partition rule: 32 partitions may start at \(0, 32, 64, 96\), not 16"),
]


@pytest.mark.parametrize("insts,message", [(i, m) for _, i, m in RULES], ids=[r[0] for r in RULES])
def test_rule_violation_names_instruction_rule_and_values(insts, message):
    with pytest.raises(RuleViolation, match=message) as info:
        run(insts)
    bad = insts[-1]
    assert f"{bad.engine}.{bad.opcode}" in str(info.value)


def test_stationary_k_limit_comes_from_the_target():
    with pytest.raises(RuleViolation, match="stationary K over the limit: K=128 > 64"):
        run([ins("pe", "load_stationary", src=STAT)], target=small_k_target())


def test_rule_message_carries_the_source_line():
    expected = r"instruction #0 dve.memset \(line 42\): operand dst: start partition rule"
    with pytest.raises(RuleViolation, match=expected):
        run([ins("dve", "memset", dst=sb(8, 16, 0, [[1, 8]]), line=42)])


def test_a_repeated_instruction_is_checked_for_what_may_differ():
    """Decode shares the work of instructions with the same operand pattern objects and attributes (the repeated
    layers of a model); their semaphores and the rules that depend on the instructions before them (PE's
    stationary tile) are still checked for each."""
    tile, out = sb(0, 64, 0, [[1, 64]]), ps(0, 64, 0, [[1, 64]])
    memset = ins("dve", "memset", dst=tile, value=1.0)
    again = ins("dve", "memset", dst=tile, value=1.0, waits=[(999, 1)])
    with pytest.raises(RuleViolation, match=r"instruction #1 dve.memset: semaphore id out of range: id 999"):
        run([memset, again])
    stationary, moving = sb(0, 64, 0, [[1, 64]], "bf16"), sb(0, 64, 512, [[1, 64]], "bf16")
    matmul = dict(dst=out, src=moving)
    with pytest.raises(RuleViolation, match=r"instruction #3 pe.multiply_moving: K of moving differs"):
        run([ins("pe", "load_stationary", src=stationary), ins("pe", "multiply_moving", **matmul),
             ins("pe", "load_stationary", src=sb(0, 32, 0, [[1, 64]], "bf16")),
             ins("pe", "multiply_moving", **matmul)])


def test_an_operand_valid_in_integer_mode_is_checked_again_in_fp32_mode():
    a, b, dst = (sb(0, 1, offset, [[1, 4]], "i64") for offset in (0, 64, 128))
    exact = ins("pool", "tensor_tensor", dst=dst, a=a, b=b, op="add", math="int")
    rounded = ins("pool", "tensor_tensor", dst=dst, a=a, b=b, op="add")
    with pytest.raises(RuleViolation, match=r"instruction #1 pool.tensor_tensor: operand dst: i64 arithmetic needs"):
        run_program(program([], [exact, rounded]), {})


@pytest.mark.parametrize("insts,match", [
    ([ins("dve", "frobnicate")], "unknown opcode 'frobnicate'"),
    ([ins("dve", "memset")], "missing operand 'dst'"),
    ([ins("dve", "tensor_scalar", dst=sb(0, 1, 0, [[1, 1]]), src=sb(0, 1, 0, [[1, 1]]), op="add")],
     "missing attribute 'scalar'"),
    ([ins("dve", "tensor_scalar", dst=sb(0, 1, 0, [[1, 1]]), src=sb(0, 1, 0, [[1, 1]]), op="mod", scalar=1.0)],
     "op='mod' not one of"),
    ([ins("sp", "dma", dst=sb(0, 1, 0, [[1, 1]]), src=hb("nope", 0, [[1, 1], [1, 1]]))], "unknown HBM tensor"),
])
def test_structural_errors_are_program_errors(insts, match):
    with pytest.raises(ProgramError, match=match):
        run(insts)


def test_deadlock_lists_each_blocked_instruction_and_its_waits():
    insts = [ins("act", "nop", waits=[(0, 1)], signals=[1]),
             ins("dve", "nop", waits=[(1, 1)], signals=[0]),
             ins("pool", "nop", signals=[2]),
             ins("pe", "nop", waits=[(2, 2)])]
    with pytest.raises(DeadlockError) as info:
        run(insts)
    text = str(info.value)
    assert "#0 act.nop waits on sem 0 is 0, needs 1" in text
    assert "#1 dve.nop waits on sem 1 is 0, needs 1" in text
    assert "#3 pe.nop waits on sem 2 is 1, needs 2" in text
    assert "pool" not in text


def load_x(signals=(0,), queue=0, off=0):
    return ins("sp", "dma", dst=sb(0, 128, off, [[1, 64]]), src=hb("x", 0, [[64, 128], [1, 64]]),
               queue=queue, signals=list(signals))


def test_uninitialized_sbuf_read_names_instruction_and_region():
    insts = [ins("dve", "tensor_copy", dst=sb(64, 96, 0, [[1, 4]]), src=sb(64, 96, 1024, [[2, 4]]), line=3)]
    run(insts)  # unchecked: no error
    with pytest.raises(UninitializedReadError,
                       match=r"#0 dve.tensor_copy \(line 3\) reads memory nothing wrote: "
                             r"sbuf\[64:96\]@1024\[2,4\]:f32 \(512 of 512 bytes unwritten; first at "
                             r"partition 64, byte 1024\)"):
        run(insts, check=True)


def test_partially_written_tile_reports_first_unwritten_byte():
    insts = [ins("dve", "memset", dst=sb(0, 128, 0, [[1, 6]]), signals=[0]),
             ins("act", "tensor_copy", dst=sb(0, 128, 64, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]]), waits=[(0, 1)])]
    with pytest.raises(UninitializedReadError, match=r"1024 of 4096 bytes unwritten; first at partition 0, byte 24"):
        run(insts, check=True)


def test_accumulating_matmul_into_unwritten_psum_is_uninitialized():
    insts = [load_x(), ins("pe", "load_stationary", src=sb(0, 128, 0, [[1, 64]]), waits=[(0, 1)]),
             ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]]), acc=1)]
    with pytest.raises(UninitializedReadError, match="pe.multiply_moving reads memory nothing wrote: psum"):
        run(insts, check=True)


def test_reading_an_output_tensor_before_writing_it():
    insts = [ins("sp", "dma", dst=sb(0, 128, 0, [[1, 64]]), src=hb("y", 0, [[64, 128], [1, 64]]))]
    with pytest.raises(UninitializedReadError, match="hbm:y@0"):
        run(insts, check=True)


def missing_wait_program(wait_both: bool):
    """Two loads on two queues; DVE waits for the slow one (and, if ``wait_both``, the fast one too)."""
    slow = ins("sp", "dma", dst=sb(0, 128, 0, [[1, 64]]), src=hb("x", 0, [[64, 128], [1, 64]]), queue=0,
               signals=[0])
    fast = ins("sp", "dma", dst=sb(0, 128, 1024, [[1, 4]]), src=hb("x", 0, [[64, 128], [1, 4]]), queue=1,
               signals=[0] if wait_both else [1])
    add = ins("dve", "tensor_tensor", dst=sb(0, 128, 2048, [[1, 4]]), a=sb(0, 128, 0, [[1, 4]]),
              b=sb(0, 128, 1024, [[1, 4]]), op="add", waits=[(0, 2 if wait_both else 1)], line=9)
    return [slow, fast, add]


def test_missing_wait_is_a_race_and_the_wait_fixes_it():
    result = run(missing_wait_program(wait_both=False))  # unchecked: runs (the data happens to be there)
    assert result.profile.time_us > 0
    with pytest.raises(RaceError) as info:
        run(missing_wait_program(wait_both=False), check=True)
    text = str(info.value)
    assert "race on sbuf partitions [0, 128) bytes [1024, 1040)" in text
    assert "#1 sp.dma (transfer on dma queue 1) writes" in text and "#2 dve.tensor_tensor (line 9) reads" in text
    run(missing_wait_program(wait_both=True), check=True)


def test_write_after_read_without_wait_is_a_race():
    read = ins("act", "activation", dst=sb(0, 128, 4096, [[1, 64]]), src=sb(0, 128, 0, [[1, 64]]), waits=[(0, 1)],
               signals=[1])
    for waits, raises in (([], True), ([(1, 1)], False)):
        insts = [load_x(), read, ins("sp", "dma", dst=sb(0, 128, 0, [[1, 64]]), src=hb("x", 0, [[64, 128], [1, 64]]),
                                     queue=0, waits=list(waits))]  # same queue: ordered after the load
        if raises:
            with pytest.raises(RaceError) as info:
                run(insts, check=True)
            assert "act.activation reads" in str(info.value)
            assert "sp.dma (transfer on dma queue 0) writes" in str(info.value)
        else:
            run(insts, check=True)


def test_transitive_semaphore_chain_orders_accesses():
    insts = [ins("pool", "memset", dst=sb(0, 128, 0, [[1, 64]]), signals=[0]),
             ins("act", "nop", waits=[(0, 1)], signals=[1]),
             ins("dve", "memset", dst=sb(0, 128, 0, [[1, 64]]), waits=[(1, 1)], value=1.0)]
    run(insts, check=True)
    insts[2].waits.clear()
    with pytest.raises(RaceError, match="pool.memset writes .* dve.memset writes"):
        run(insts, check=True)


def test_interleaved_strided_writes_do_not_race():
    insts = [ins("pool", "memset", dst=sb(0, 128, 0, [[2, 32]])),
             ins("dve", "memset", dst=sb(0, 128, 4, [[2, 32]])),
             ins("dve", "memset", dst=sb(0, 32, 256, [[1, 4]]))]
    run(insts, check=True)
    insts.append(ins("dve", "memset", dst=sb(0, 128, 8, [[1, 1]])))  # hits one of pool's elements
    with pytest.raises(RaceError, match=r"bytes \[8, 12\): instruction #0 pool.memset writes"):
        run(insts, check=True)


# differential test: pruning the race detector's history must not change what it reports ------

REGIONS = [(p0, p1, off, pattern) for p0, p1 in ((0, 32), (32, 64), (0, 64))
           for off in (0, 16) for pattern in ([[1, 4]], [[2, 4]])]


@st.composite
def random_programs(draw):
    insts = []
    for _ in range(draw(st.integers(3, 14))):
        engine = draw(st.sampled_from(["act", "dve", "pool", "sp"]))
        p0, p1, off, pattern = draw(st.sampled_from(REGIONS))
        dst = sb(p0, p1, off, pattern)
        src_p0, src_p1, src_off, src_pattern = draw(st.sampled_from([r for r in REGIONS if r[1] - r[0] == p1 - p0]))
        src = sb(src_p0, src_p1, 64 + src_off, src_pattern)
        waits = [(3, 1)]  # the sources are initialized
        waits += draw(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2)), max_size=1))
        signals = draw(st.lists(st.integers(0, 2), max_size=2))
        if engine == "sp":
            insts.append(ins("sp", "dma", dst=dst, src=src, queue=draw(st.integers(0, 2)), waits=waits,
                             signals=signals))
        elif engine != "act" and draw(st.booleans()):
            insts.append(ins(engine, "memset", dst=dst, waits=waits, signals=signals))
        else:
            insts.append(ins(engine, "tensor_copy", dst=dst, src=src, waits=waits, signals=signals))
    init = ins("pool", "memset", dst=sb(0, 64, 64, [[1, 16]]), signals=[3])
    return [init, *insts]


def outcome(insts) -> str:
    try:
        run(insts, check=True)
    except (RaceError, UninitializedReadError, DeadlockError) as e:
        return f"{type(e).__name__}: {e}".split(" and ")[-1]  # the access that was flagged
    return "ok"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_pruning_never_changes_the_verdict(insts):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "PRUNE_EVERY", 1)  # prune after every instruction
        pruned = outcome(insts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "PRUNE_EVERY", 1 << 30)
        mp.setattr(checks, "_covers", lambda big, small: False)
        full = outcome(insts)
    assert pruned.startswith(full.split(":")[0])
    if full.startswith("RaceError"):
        assert pruned == full


# checked mode on the newer opcodes: each reads (or writes) bytes a DMA transfer writes --------

VICTIM = sb(0, 64, 0, [[1, 32]])  # the bytes the DMA transfer overwrites
ELSEWHERE = sb(0, 64, 512, [[1, 32]])  # initialized, never overwritten
RACERS = {
    "pe.transpose": ins("pe", "transpose", dst=ps(0, 32, 0, [[1, 64]]), src=VICTIM),
    "act.activation acc": ins("act", "activation", dst=sb(0, 64, 4096, [[1, 32]]), src=VICTIM,
                              acc=sb(0, 64, 8192, [[1, 1]]), acc_cmd="reset_reduce"),
    "dve.tensor_scalar scalar_vec": ins("dve", "tensor_scalar", dst=sb(0, 64, 4096, [[1, 32]]), src=ELSEWHERE,
                                        scalar_vec=sb(0, 64, 8, [[1, 1]]), op="add", scalar=0.0),
    "dve.select": ins("dve", "select", dst=sb(0, 64, 4096, [[1, 32]]), pred=VICTIM, a=ELSEWHERE, b=ELSEWHERE),
    "dve.transpose32": ins("dve", "transpose32", dst=sb(0, 64, 4096, [[1, 32]]), src=VICTIM),
    "dve.bn_stats": ins("dve", "bn_stats", dst=sb(0, 64, 4096, [[1, 6]]), src=VICTIM),
    "dve.bn_aggr": ins("dve", "bn_aggr", dst=sb(0, 64, 4096, [[1, 2]]), src=sb(0, 64, 0, [[1, 6]])),
    "dve.tensor_reduce axes": ins("dve", "tensor_reduce", dst=sb(0, 64, 4096, [[1, 4]]),
                                  src=sb(0, 64, 0, [[8, 4], [1, 8]]), op="max", axes="1"),
    "dve.iota (write-write)": ins("dve", "iota", dst=sb(0, 64, 16, [[1, 4]])),
    "pool.affine_select": ins("pool", "affine_select", dst=sb(0, 64, 4096, [[1, 32]]), src=VICTIM, fill=0.0),
    "pool.partition_reduce": ins("pool", "partition_reduce", dst=sb(0, 1, 4096, [[1, 32]]), src=VICTIM, op="add"),
}


@pytest.mark.parametrize("name", RACERS)
def test_race_detector_covers_the_newer_opcodes(name):
    def build(with_wait: bool):
        racer = copy.deepcopy(RACERS[name])
        racer.waits = [(0, 1), (1, 1)] if with_wait else [(0, 1)]
        return [ins("pool", "memset", dst=sb(0, 64, 0, [[1, 1024]]), signals=[0]),
                ins("sp", "dma", dst=VICTIM, src=hb("x", 0, [[64, 64], [1, 32]]), waits=[(0, 1)], signals=[1]),
                racer]

    with pytest.raises(RaceError) as info:
        run(build(with_wait=False), check=True)
    text = str(info.value)
    assert "race on sbuf partitions [0, 64)" in text
    assert "#1 sp.dma (transfer on dma queue 0) writes" in text
    assert f"#2 {name.split()[0]}" in text and "with no semaphore chain ordering them" in text
    run(build(with_wait=True), check=True)


def test_moving_k_limit_comes_from_the_target():
    insts = [ins("pe", "load_stationary", src=sb(0, 64, 0, [[1, 64]], "bf16")),
             ins("pe", "multiply_moving", dst=ps(0, 64, 0, [[1, 8]]), src=sb(0, 128, 0, [[1, 8]], "bf16"))]
    with pytest.raises(RuleViolation, match="#1 pe.multiply_moving: moving K over the limit: K=128 > 64 for bf16"):
        run(insts, target=small_k_target())


def test_violations_in_assembled_text_name_the_line_of_the_s_file():
    from isa.asm import parse_program

    text = (".target trn1\n"
            "dve.memset dst=sbuf[0:64]@0[1,32]:f32 value=0.0\n"
            "; a comment line\n"
            "dve.transpose32 dst=sbuf[0:64]@512[1,40]:f32 src=sbuf[0:64]@0[1,40]:f32\n")
    with pytest.raises(RuleViolation, match=r"^instruction #1 dve.transpose32 \(line 4\): transpose32 needs one "
                                            r"block \(P, F <= 32\) or P and F multiples of 32: src 64x40$"):
        run_program(parse_program(text), {})
