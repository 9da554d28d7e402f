"""Scheduling: topological placement, minimal semaphores, engine choice, numerics and speed of the
list scheduler against the in-order one; GEMM performance (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from backend import BackendOptions, compile_module
from backend.costs import CostModel
from backend.deps import dependencies, stationary_groups
from backend.emit import ProgramBuilder
from backend.lower import Lowering
from backend.schedule import (
    SCHEDULERS,
    engine_choices,
    list_schedule,
    schedule,
)
from backend.semaphores import ENGINE_SEMS, PE_LOAD_SEM, QUEUE_SEM_BASE
from hlo.parser import parse_module
from isa.emulator import run_program
from isa.program import AccessPattern, Instruction
from isa.target import load_target
from tests.backend.util import BF16, bf16_round, dot_text, mlp_text, mlp_weights, rand, run_hlo

GEMM = """HloModule gemm
ENTRY %main (x: f32[{s},{s}]) -> f32[{s},{s}] {{
  %x = f32[{s},{s}] parameter(0)
  %xc = bf16[{s},{s}] convert(%x)
  %w = bf16[{s},{s}] constant({{...}}), data="w"
  ROOT %d = f32[{s},{s}] dot(%xc, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""

KLOOP = """HloModule m
%loop (p0: f32[256,1500], p1: f32[256,1500]) -> f32[256,1500] {
  %p0 = f32[256,1500] parameter(0)
  %p1 = f32[256,1500] parameter(1)
  %t = f32[256,1500] tanh(%p0)
  ROOT %m = f32[256,1500] multiply(%t, %p1)
}
ENTRY %main (x: f32[256,1500], y: f32[256,1500]) -> f32[256,1500] {
  %x = f32[256,1500] parameter(0)
  %y = f32[256,1500] parameter(1)
  ROOT %f = f32[256,1500] fusion(%x, %y), kind=kLoop, calls=%loop
}
"""


def _cases():
    """(name, HLO text, inputs, constants) of a few kernels."""
    sizes = (300, 600, 200, 10)
    return {
        "mlp": (mlp_text(sizes, 64), [rand(64, 300, seed=3)], mlp_weights(sizes)),
        "mlp_bf16": (mlp_text(sizes, 130, dtype="bf16"), [rand(130, 300, seed=4)], mlp_weights(sizes, "bf16")),
        "gemm384": (GEMM.format(s=384), [rand(384, 384, seed=1)], {"w": rand(384, 384, seed=2, dtype=BF16)}),
        "dot_t": (dot_text(200, 300, 700, lhs_transposed=True), [rand(300, 200, seed=5), rand(300, 700, seed=6)],
                  None),
        "kloop": (KLOOP, [rand(256, 1500, seed=7), rand(256, 1500, seed=8)], None),
    }


CASES = _cases()


def _lowered(name: str) -> tuple[list[Instruction], set[str], CostModel]:
    text, _, consts = CASES[name]
    target = load_target("trn1")
    builder = ProgramBuilder(target, BackendOptions())
    Lowering(parse_module(text, constants=consts), builder).run()
    untracked = {n for n, t in builder.program.tensors.items() if t.kind in ("input", "const")}
    return builder.ops, untracked, builder.costs


@pytest.mark.parametrize("mode", SCHEDULERS)
def test_placement_is_a_topological_order(mode):
    """Every dependency is respected; the list scheduler may reorder stationary groups on PE (then the
    stationary tile is no dependency) but keeps each together: a matmul follows its own load."""
    for name in ("mlp", "dot_t", "gemm384"):
        ops, untracked, costs = _lowered(name)
        groups = stationary_groups(ops)
        preds = dependencies(ops, untracked, chain_stationary=mode != "list")
        result = schedule(ops, costs, untracked, 16, mode)
        assert sorted(result.order) == list(range(len(ops)))
        position = {op: k for k, op in enumerate(result.order)}
        for i, ps in enumerate(preds):
            assert all(position[p] < position[i] for p in ps), (name, i)
        for i in result.queues:
            assert 0 <= ops[i].attrs["queue"] < 16
        load = -1
        for i in (i for i in result.order if ops[i].engine == "pe"):
            if ops[i].opcode == "load_stationary":
                load = i
            elif ops[i].opcode == "multiply_moving":
                assert load == groups[i], (name, i)
        if mode == "inorder":
            assert result.order == list(range(len(ops)))


def _stream_of(inst: Instruction) -> str:
    if inst.opcode == "dma":
        return f"q{inst.attrs['queue']}"
    return "pe.load" if inst.opcode == "load_stationary" else inst.engine


def redundant_waits(program_instructions: list[Instruction]) -> list[str]:
    """Waits implied by the stream's earlier waits or by another wait of the same instruction, found by
    replaying the program's semaphores with vector clocks (knowledge: semaphore -> signals known done).

    Streams complete in order (ACT, DVE, POOL, each DMA queue, PE's matmuls, PE's loads); a PE matmul
    starts after the last load completed; a DMA's transfer follows its SP trigger."""
    issue: dict[str, dict[int, int]] = {}  # per issuing engine
    last: dict[str, dict[int, int]] = {}  # per stream: knowledge once its last instruction completed
    history: dict[int, list[dict[int, int]]] = {}  # per semaphore: knowledge at each signal
    problems = []
    for n, inst in enumerate(program_instructions):
        know = dict(issue.get(inst.engine, {}))
        brought = [history[s][v - 1] for s, v in inst.waits]
        for k, (s, v) in enumerate(inst.waits):
            others = [b.get(s, 0) for j, b in enumerate(brought) if j != k]
            if max([know.get(s, 0), *others]) >= v:
                problems.append(f"#{n} {inst.engine}.{inst.opcode} wait sem{s}>={v} is implied")
        for (s, v), b in zip(inst.waits, brought, strict=True):
            for key, value in b.items():
                know[key] = max(know.get(key, 0), value)
            know[s] = max(know.get(s, 0), v)
        issue[inst.engine] = know
        stream = _stream_of(inst)
        after = dict(know)
        sources = [last.get(stream, {})] + ([last.get("pe.load", {})] if stream == "pe" else [])
        for source in sources:
            for key, value in source.items():
                after[key] = max(after.get(key, 0), value)
        for s in inst.signals:
            after[s] = len(history.setdefault(s, [])) + 1
            history[s].append(after)
        last[stream] = after
    return problems


@pytest.mark.parametrize("mode", SCHEDULERS)
def test_waits_are_minimal(mode):
    for name in ("mlp", "gemm384", "kloop"):
        text, inputs, consts = CASES[name]
        _, result = run_hlo(text, inputs, consts, options=BackendOptions(list_schedule=mode), check=False)
        instructions = result.program.instructions
        assert redundant_waits(instructions) == [], name
        for inst in instructions:
            sems = [s for s, _ in inst.waits]
            assert len(sems) == len(set(sems)), inst  # at most one wait per semaphore
            assert len(inst.signals) <= 1
            own = {"pe": (ENGINE_SEMS["pe"], PE_LOAD_SEM)}.get(inst.engine, (ENGINE_SEMS.get(inst.engine),))
            if inst.engine != "sp":
                assert not set(sems) & set(own), inst  # never on its own in-order stream
        # only what something waits on signals
        waited = {(s, v) for inst in instructions for s, v in inst.waits}
        counts: dict[int, int] = {}
        for inst in instructions:
            for s in inst.signals:
                counts[s] = counts.get(s, 0) + 1
        assert {(s, c) for s, n in counts.items() for c in range(1, n + 1)} == waited
        assert "wait" in result.schedule


@pytest.mark.parametrize("name", list(CASES))
def test_schedulers_agree_in_checked_mode_and_list_is_not_slower(name):
    text, inputs, consts = CASES[name]
    outs, times = {}, {}
    for mode in SCHEDULERS:
        module = parse_module(text, constants=consts)
        result = compile_module(module, "trn1", options=BackendOptions(list_schedule=mode))
        run = run_program(result.program, {f"in{i}": x for i, x in enumerate(inputs)}, check=True)
        outs[mode] = [run.outputs[n] for n in result.program.outputs]
        times[mode] = run.profile.time_us
    for mode in SCHEDULERS:
        for a, b in zip(outs[mode], outs["inorder"], strict=True):
            np.testing.assert_array_equal(a, b)
    assert times["list"] <= times["inorder"] * 1.0001, times


def test_estimate_matches_the_emulator():
    text, inputs, consts = CASES["mlp_bf16"]
    module = parse_module(text, constants=consts)
    result = compile_module(module, "trn1")
    estimate = float(result.schedule.split("estimated end ")[1].split()[0])
    run = run_program(result.program, {"in0": inputs[0]})
    assert estimate == pytest.approx(run.profile.time_us, rel=0.02)


def _ap(memory: str, offset: int = 0, tensor: str | None = None, free: int = 512) -> AccessPattern:
    if memory == "hbm":
        return AccessPattern("hbm", "f32", offset, ((1, free),), partitions=128, tensor=tensor, partition_stride=free)
    return AccessPattern(memory, "f32", offset, ((1, free),), partitions=128)


def test_engine_choices_follow_the_isa_table():
    sbuf, psum = _ap("sbuf"), _ap("psum", free=256)
    copy = Instruction("act", "activation", {"dst": sbuf, "src": psum}, {"func": "copy"})
    assert engine_choices(copy) == ("act", "dve")  # POOL cannot touch PSUM
    copy_sbuf = Instruction("dve", "tensor_copy", {"dst": _ap("sbuf", 4096), "src": sbuf})
    assert set(engine_choices(copy_sbuf)) == {"act", "dve", "pool"} and engine_choices(copy_sbuf)[0] == "dve"
    gelu = Instruction("act", "activation", {"dst": sbuf, "src": psum}, {"func": "gelu"})
    assert engine_choices(gelu) == ("act",)  # activation functions only on ACT
    scaled = Instruction("act", "activation", {"dst": sbuf, "src": psum}, {"func": "copy", "scale": 2.0})
    assert engine_choices(scaled) == ("act",)
    alu = Instruction("pool", "tensor_tensor", {"dst": sbuf, "a": sbuf, "b": _ap("sbuf", 4096)}, {"op": "add"})
    assert engine_choices(alu) == ("pool", "dve")
    mm = Instruction("pe", "multiply_moving", {"dst": psum, "src": sbuf}, {"acc": 0})
    assert engine_choices(mm) == ("pe",)


def test_balanced_engines_respect_memories():
    _, result = run_hlo(*CASES["gemm384"], check=False)
    counts: dict[str, int] = {}
    for inst in result.program.instructions:
        if inst.engine == "pool":
            assert all(ap.memory != "psum" for ap in inst.operands.values()), inst
        if inst.opcode in ("tensor_copy", "activation"):
            counts[inst.engine] = counts.get(inst.engine, 0) + 1
    assert len(counts) >= 2, counts  # copies are spread over several engines


def test_critical_path_goes_first():
    """SP holds a store (nothing after it) and a load that feeds a chain of DVE work: the list
    scheduler triggers the load first, the ready-time scheduler keeps program order."""
    ops = [Instruction("sp", "dma", {"dst": _ap("hbm", tensor="out0"), "src": _ap("sbuf", 8192)}),
           Instruction("sp", "dma", {"dst": _ap("sbuf"), "src": _ap("hbm", tensor="in0")})]
    ops += [Instruction("dve", "tensor_scalar", {"dst": _ap("sbuf"), "src": _ap("sbuf")},
                        {"op": "add", "scalar": 1.0}) for _ in range(6)]
    costs = CostModel(load_target("trn1"))
    preds = dependencies(ops, {"in0"})
    assert preds[0] == [] and preds[2] == [1]
    assert list_schedule(ops, preds, costs, 16, "list").order[:2] == [1, 0]
    assert list_schedule(ops, preds, costs, 16, "ready_time").order[:2] == [0, 1]


def test_semaphore_ids():
    assert sorted(ENGINE_SEMS.values()) == [0, 1, 2, 3] and PE_LOAD_SEM == 4 and QUEUE_SEM_BASE == 5
    assert QUEUE_SEM_BASE + 16 <= load_target("trn1").data["semaphores"]


@pytest.mark.slow
def test_gemm_2048_mfu():
    """2048^3 bf16 GEMM (f32 input auto-cast, bf16 weights): >= 80% of PE peak on the emulator."""
    x, w = rand(2048, 2048, seed=1), rand(2048, 2048, seed=2, dtype=BF16)
    result = compile_module(parse_module(GEMM.format(s=2048), constants={"w": w}), "trn1")
    run = run_program(result.program, {"in0": x})
    ref = bf16_round(x) @ w.astype(np.float32)
    np.testing.assert_allclose(run.outputs["out0"], ref, rtol=1e-3, atol=1e-2)
    assert run.profile.mfu >= 0.80, run.profile.summary()
