"""Timing against analytic values from the target file (machine-model.md figures), within 5%."""

from __future__ import annotations

import copy

import ml_dtypes
import numpy as np
import pytest

from isa.emulator import run_program
from isa.target import Target, load_target
from tests.isa.emulator_helpers import hb, ins, program, ps, sb

TRN1 = load_target("trn1")
PE_GHZ, DVE_GHZ, ACT_GHZ, SP_GHZ = (TRN1.clock_ghz(e) for e in ("pe", "dve", "act", "sp"))
DMA = TRN1.data["dma"]
TRIGGER_NS = DMA["trigger_cycles"] / SP_GHZ


def time_ns(insts, tensors=(), inputs=None, target=None, meta=None):
    prog = program(list(tensors), insts, meta=meta)
    result = run_program(prog, inputs or {}, target=target)
    return result.profile.time_us * 1000.0, result.profile


def approx(value):
    return pytest.approx(value, rel=0.05)


@pytest.mark.parametrize("dt,factor", [("bf16", 1), ("f32", 4)])
@pytest.mark.parametrize("n", [16, 64, 200, 512])
def test_back_to_back_multiply_moving(n, dt, factor):
    count, m = 12, 128
    insts = [ins("pe", "load_stationary", src=sb(0, 128, 0, [[1, m]], dt))]
    insts += [ins("pe", "multiply_moving", dst=ps(0, m, 0, [[1, n]]), src=sb(0, 128, 1024, [[1, n]], dt))
              for _ in range(count)]
    elapsed, profile = time_ns(insts)
    load = 0.25 * max(m, 64) * factor
    assert elapsed == approx((load + count * max(n, 64) * factor) / PE_GHZ)
    assert profile.instruction_counts == {"pe.load_stationary": 1, "pe.multiply_moving": count}


def test_load_stationary_hides_behind_the_previous_multiply_moving():
    n, count = 256, 8
    insts = []
    for i in range(count):
        insts.append(ins("pe", "load_stationary", src=sb(0, 128, 256 * (i % 2), [[1, 128]], "bf16")))
        insts.append(ins("pe", "multiply_moving", dst=ps(0, 128, 0, [[1, n]]),
                         src=sb(0, 128, 1024, [[1, n]], "bf16")))
    elapsed, _ = time_ns(insts)
    assert elapsed == approx((0.25 * 128 + count * n) / PE_GHZ)  # only the first load is exposed


@pytest.mark.parametrize("engine,opcode,inputs,clock", [
    ("dve", "tensor_scalar", 1, DVE_GHZ), ("dve", "tensor_tensor", 2, DVE_GHZ),
    ("act", "activation", 1, ACT_GHZ), ("pool", "tensor_copy", 1, TRN1.clock_ghz("pool")),
])
@pytest.mark.parametrize("n", [1, 128, 2048])
def test_stream_engine_cost_is_n_per_input_plus_overhead(engine, opcode, inputs, clock, n):
    tile = sb(0, 128, 0, [[1, n]])
    operands = {"tensor_tensor": {"a": tile, "b": tile, "op": "add"},
                "tensor_scalar": {"src": tile, "op": "add", "scalar": 1.0}}.get(opcode, {"src": tile})
    insts = [ins(engine, opcode, dst=sb(0, 128, 16384, [[1, n]]), **operands) for _ in range(3)]
    elapsed, profile = time_ns(insts)
    overhead = 100 if engine == "dve" and n < 32 else 60  # DVE: N << 128 costs the larger overhead
    assert elapsed == approx(3 * (inputs * n + overhead) / clock)
    assert profile.engine_busy[engine] == approx(1.0)


ROW = 8192  # bytes per partition moved by the DMA tests


def dma_load(p0: int, p1: int, queue: int, signals=()):
    cols = ROW // 4
    return ins("sp", "dma", dst=sb(p0, p1, 0, [[1, cols]]), src=hb("x", p0 * ROW, [[cols, p1 - p0], [1, cols]]),
               queue=queue, signals=list(signals))


def dma_time(bytes_: int, runs: int, rate: float) -> float:
    return (bytes_ + DMA["descriptor_overhead_bytes"] * runs) / rate


X = [("x", "input", "f32", (128, ROW // 4))]
X_IN = {"x": np.zeros((128, ROW // 4), np.float32)}


def test_one_dma_versus_the_same_bytes_over_16_queues():
    one, profile = time_ns([dma_load(0, 128, 0)], X, X_IN)
    rate = DMA["queue_bytes_per_ns"]
    assert one == approx(TRIGGER_NS + DMA["fixed_cost_ns"] + dma_time(128 * ROW, 128, rate))
    assert profile.hbm_read_bytes == 128 * ROW and profile.hbm_write_bytes == 0
    split, profile = time_ns([dma_load(8 * q, 8 * q + 8, q) for q in range(16)],
                             [("x", "input", "f32", (128, ROW // 4))], X_IN)
    assert split == approx(16 * TRIGGER_NS + DMA["fixed_cost_ns"] + dma_time(8 * ROW, 8, rate))
    assert one / split > 10
    # the union of the queues: the transfers start one trigger apart
    assert profile.engine_busy["dma"] == approx((15 * TRIGGER_NS + dma_time(8 * ROW, 8, rate)) / split)


def test_concurrent_queues_share_the_hbm_bandwidth():
    data = copy.deepcopy(TRN1.data)
    data["dma"]["queue_bytes_per_ns"] = 100.0  # 16 x 100 > 410: the HBM share binds
    fast = Target("fast-queues", data)
    split, _ = time_ns([dma_load(8 * q, 8 * q + 8, q) for q in range(16)], X, X_IN, target=fast)
    hbm = data["hbm"]["bytes_per_ns"]
    # the transfers start TRIGGER_NS apart: bounded below by all bytes at the HBM rate
    lower = DMA["fixed_cost_ns"] + TRIGGER_NS + 16 * dma_time(8 * ROW, 8, hbm)
    assert split == approx(lower)
    assert split > 16 * TRIGGER_NS + DMA["fixed_cost_ns"] + dma_time(8 * ROW, 8, 100.0) * 2


def test_dma_waits_are_released_at_transfer_completion_not_trigger():
    insts = [dma_load(0, 128, 0, signals=[0]), ins("dve", "nop", waits=[(0, 1)])]
    elapsed, profile = time_ns(insts, X, X_IN)
    transfer_end = TRIGGER_NS + DMA["fixed_cost_ns"] + dma_time(128 * ROW, 128, DMA["queue_bytes_per_ns"])
    assert elapsed == approx(transfer_end + TRN1.data["sync_cycles"] / DVE_GHZ)
    assert profile.stalls["dve"]["dma.q0"] == approx(transfer_end / 1000.0)


def test_pe_dma_pipeline_is_bounded_by_dma():
    """T moving tiles streamed in on two queues; PE multiplies each as it lands."""
    tiles, n = 8, 512
    insts = [ins("sp", "dma", dst=sb(0, 128, 0, [[1, 128]], "bf16"),
                 src=hb("w", 0, [[128, 128], [1, 128]], "bf16"), queue=2, signals=[0])]
    for t in range(tiles):
        insts.append(ins("sp", "dma", dst=sb(0, 128, 1024 + t * n * 2, [[1, n]], "bf16"),
                         src=hb("x", t * n * 2, [[tiles * n, 128], [1, n]], "bf16"), queue=t % 2, signals=[1]))
    insts.append(ins("pe", "load_stationary", src=sb(0, 128, 0, [[1, 128]], "bf16"), waits=[(0, 1)]))
    for t in range(tiles):
        insts.append(ins("pe", "multiply_moving", dst=ps(0, 128, 0, [[1, n]]),
                         src=sb(0, 128, 1024 + t * n * 2, [[1, n]], "bf16"), waits=[(1, t + 1)]))
    tensors = [("w", "input", "bf16", (128, 128)), ("x", "input", "bf16", (128, tiles * n))]
    inputs = {name: np.zeros(shape, ml_dtypes.bfloat16)
              for name, _, _, shape in tensors}
    elapsed, profile = time_ns(insts, tensors, inputs)
    rate = DMA["queue_bytes_per_ns"]
    per_tile = dma_time(128 * n * 2, 128, rate)
    queue_free = [0.0, 0.0]
    for t in range(tiles):  # triggers issue back to back after the weight load's trigger
        ready = (t + 2) * TRIGGER_NS + DMA["fixed_cost_ns"]
        queue_free[t % 2] = max(ready, queue_free[t % 2]) + per_tile
    expected = max(queue_free) + n / PE_GHZ
    assert elapsed == approx(expected)
    assert profile.engine_busy["pe"] < 0.1
    assert set(profile.stalls["pe"]) <= {"dma.q0", "dma.q1", "dma.q2"}
    assert profile.mfu == approx(tiles * 128 * 128 * n / (128 * 128 * elapsed * PE_GHZ))


def test_trn2_vector_engine_runs_bf16_at_its_faster_rate():
    trn2 = load_target("trn2")
    rate, ghz = trn2.data["stream"]["bf16_rate"]["dve"], trn2.clock_ghz("dve")
    n = 2048
    for dt, per_element in (("bf16", 1 / rate), ("f32", 1.0)):
        insts = [ins("dve", "tensor_scalar", dst=sb(0, 128, 16384, [[1, n]], dt), src=sb(0, 128, 0, [[1, n]], dt),
                     op="add", scalar=1.0)]
        elapsed, _ = time_ns(insts, target=trn2)
        assert elapsed == approx((n * per_element + 60) / ghz)


@pytest.mark.parametrize("dependent", [False, True])
def test_back_to_back_dependent_dve_ops_pay_the_larger_overhead(dependent):
    """A chain where each tensor_scalar reads what the one before it wrote: N + 100 cycles each, else N + 60."""
    n, count = 2048, 4
    tiles = [sb(0, 128, 8192 * i, [[1, n]]) for i in range(count + 1)]
    insts = [ins("dve", "tensor_scalar", dst=tiles[i + 1], src=tiles[i] if dependent else tiles[0], op="add",
                 scalar=1.0) for i in range(count)]
    elapsed, _ = time_ns(insts)
    first = n + 60  # nothing before it on DVE
    rest = (count - 1) * (n + (100 if dependent else 60))
    assert elapsed == approx((first + rest) / DVE_GHZ)


def test_dve_op_on_few_elements_pays_the_larger_overhead_and_act_does_not():
    n = 8  # "N << 128"
    insts = [ins("dve", "tensor_scalar", dst=sb(0, 128, 64, [[1, n]]), src=sb(0, 128, 0, [[1, n]]), op="add",
                 scalar=1.0),
             ins("act", "activation", dst=sb(0, 128, 192, [[1, n]]), src=sb(0, 128, 128, [[1, n]]))]
    _, profile = time_ns(insts)
    dve, act = (profile.spans[i].dur_ns for i in range(2))
    assert dve == approx((n + 100) / DVE_GHZ) and act == approx((n + 60) / ACT_GHZ)


@pytest.mark.parametrize("engine,opcode,operands,inputs", [
    ("dve", "select", {"pred": "t", "a": "t", "b": "t"}, 3),
    ("pool", "affine_select", {"src": "t", "fill": 0.0}, 1),
    ("pool", "partition_reduce", {"src": "t", "op": "add"}, 1),
    ("dve", "bn_stats", {"src": "t"}, 1),
    ("dve", "transpose32", {"src": "t"}, 1),
])
def test_newer_stream_instructions_cost_n_per_input_plus_overhead(engine, opcode, operands, inputs):
    n = 512
    tile = sb(0, 128, 0, [[1, n]])
    dst = {"partition_reduce": sb(0, 1, 16384, [[1, n]]), "bn_stats": sb(0, 128, 16384, [[1, 6]])}.get(
        opcode, sb(0, 128, 16384, [[1, n]]))
    fields = {k: (tile if v == "t" else v) for k, v in operands.items()}
    elapsed, _ = time_ns([ins(engine, opcode, dst=dst, **fields)])
    assert elapsed == approx((inputs * n + 60) / TRN1.clock_ghz(engine))


def test_activation_reading_its_accumulator_costs_act_read_accumulator_cycles():
    n = 1024
    src, dst, acc = sb(0, 128, 0, [[1, n]]), sb(0, 128, 8192, [[1, n]]), sb(0, 128, 16384, [[1, 1]])
    insts = [ins("act", "activation", dst=dst, src=src, func="exp", acc_cmd="reset_reduce"),
             ins("act", "activation", dst=dst, src=src, func="exp", acc_cmd="reduce", acc=acc)]
    _, profile = time_ns(insts)
    reduce_only, read_out = (profile.spans[i].dur_ns for i in range(2))
    extra = TRN1.data["act"]["read_accumulator_cycles"]
    assert reduce_only == approx((n + 60) / ACT_GHZ)
    assert read_out == approx((n + 60 + extra) / ACT_GHZ)


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("parts,free", [(128, 128), (128, 32), (16, 128)])
def test_pe_transpose_costs_one_matmul_on_trn1_and_the_native_figure_on_trn2(parts, free, dt):
    count = 6
    insts = [ins("pe", "transpose", dst=ps(0, free, 0, [[1, parts]]), src=sb(0, parts, 0, [[1, free]], dt))
             for _ in range(count)]
    trn1, _ = time_ns(insts)
    factor = 4 if dt == "f32" else 1
    assert trn1 == approx(count * max(parts, 64) * factor / PE_GHZ)  # a MultiplyMoving of an identity [P, P]
    trn2_target = load_target("trn2")
    native = trn2_target.data["pe"]["transpose"]
    trn2, _ = time_ns(insts, target=trn2_target)
    cycles = max(parts, native["min_interval"]) * (native["fp32_factor"] if dt == "f32" else 1)
    assert trn2 == approx(count * cycles / trn2_target.clock_ghz("pe"))


@pytest.mark.parametrize("dt", ["fp8e4", "fp8e5", "bf16"])
def test_trn2_runs_fp8_matmuls_at_twice_the_bf16_rate(dt):
    trn2 = load_target("trn2")
    count, n = 10, 512
    insts = [ins("pe", "load_stationary", src=sb(0, 128, 0, [[1, 128]], dt))]
    insts += [ins("pe", "multiply_moving", dst=ps(0, 128, 0, [[1, n]]), src=sb(0, 128, 1024, [[1, n]], dt))
              for _ in range(count)]
    rate = 2 if dt.startswith("fp8") else 1
    elapsed, profile = time_ns(insts, target=trn2)
    assert elapsed == approx((0.25 * 128 + count * n) / rate / trn2.clock_ghz("pe"))
    assert profile.mfu == approx(rate * count * n / (0.25 * 128 + count * n))
    trn1_elapsed, _ = time_ns(insts)
    assert trn1_elapsed == approx((0.25 * 128 + count * n) / PE_GHZ)  # no fp8 speed-up on trn1
