"""The scheduler's queue-rate DMA path (targets where the HBM fair share cannot bind, see the module doc of
isa.emulator.scheduler) against its fair-share path forced on the same programs: every time within 1e-9
relative (the fair-share path completes a transfer within EPS_BYTES of its end and gets there through a chain of
rounded updates), each queue's transfers and each semaphore's increments in the same order, the same outputs
bit for bit."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from isa.emulator import Emulator
from isa.emulator.scheduler import DMA_DONE, Scheduler, share_can_bind
from isa.neff import load
from isa.target import load_target
from tests.isa.emulator_fingerprint import DATA, MODELS, inputs
from tests.isa.emulator_helpers import hb, ins, program, sb

RTOL = 1e-9


def _schedule(prog, fair_share: bool):
    emulator = Emulator(prog, checks="off")
    emulator.memory.load_inputs(inputs(prog))
    scheduler = Scheduler(emulator.ops, emulator.target, fair_share=fair_share)
    timeline = scheduler.run()
    for run in scheduler.executed:
        run()
    outputs = {name: emulator.memory.read_tensor(name) for name in prog.outputs}
    queues = defaultdict(list)  # queue -> its transfers in start order
    for index in sorted(timeline.transfer_start, key=timeline.transfer_start.__getitem__):
        queues[emulator.ops[index].queue].append(index)
    index = {id(op.run): op.index for op in emulator.ops}
    order = [index[id(run)] for run in scheduler.executed]  # the numerics in the order the schedule ran them
    return scheduler, timeline, dict(queues), order, outputs


def test_trn1_takes_the_queue_rate_path_and_trn2_the_fair_share_one():
    assert not share_can_bind(load_target("trn1"))  # 410 / 16 = 25.6 >= 17 bytes/ns
    assert share_can_bind(load_target("trn2"))  # 362 / 16 = 22.6 < 23
    prog = load(DATA / "mlp.neff")
    ops = Emulator(prog, checks="off").ops
    assert Scheduler(ops, load_target("trn1")).handlers[DMA_DONE].__func__ is Scheduler._done_q
    assert Scheduler(ops, load_target("trn1"), fair_share=True).handlers[DMA_DONE].__func__ is Scheduler._dma_done


def _compare(prog):
    """Both paths on ``prog``: the asserts of the module doc. Returns the queue-rate path's schedule."""
    fast_scheduler, fast, fast_queues, fast_order, fast_out = _schedule(prog, fair_share=False)
    _, slow, slow_queues, slow_order, slow_out = _schedule(prog, fair_share=True)
    assert fast_scheduler.handlers[DMA_DONE].__func__ is Scheduler._done_q
    np.testing.assert_allclose(fast.start, slow.start, rtol=RTOL, atol=0)
    np.testing.assert_allclose(fast.end, slow.end, rtol=RTOL, atol=0)
    for a, b in ((fast.transfer_start, slow.transfer_start), (fast.transfer_end, slow.transfer_end)):
        assert a.keys() == b.keys()
        np.testing.assert_allclose([a[k] for k in b], list(b.values()), rtol=RTOL, atol=0)
    assert fast.time_ns == pytest.approx(slow.time_ns, rel=RTOL, abs=0)
    assert fast_queues == slow_queues
    assert dict(fast.increments) == dict(slow.increments)
    assert {e: set(by) for e, by in fast.stalls.items() if by} == {e: set(by) for e, by in slow.stalls.items() if by}
    for engine, by in slow.stalls.items():
        for source, stalled in by.items():  # sums of differences of times: to 1e-9 of the run's time
            assert fast.stalls[engine][source] == pytest.approx(stalled, abs=RTOL * slow.time_ns)
    assert fast_order == slow_order
    for key in slow_out:
        np.testing.assert_array_equal(fast_out[key], slow_out[key])
    return fast


@pytest.mark.parametrize("name", list(MODELS))
def test_queue_rate_path_matches_the_fair_share_path(name):
    _compare(load(DATA / f"{name}.neff"))


def test_transfers_behind_one_that_has_not_arrived_wait_for_it():
    """Queue 0: A is running when B and C are triggered; B arrives after A has ended (its queue free: it starts
    on arrival), C arrives while B runs and waits behind it, and so does E: A's end must not start C."""
    def load(p: int, off: int, queue: int, waits=(), signals=()):
        return ins("sp", "dma", dst=sb(0, 1, off, [[1, 64]]), src=hb("x", p * 512, [[512, 1], [1, 64]]),
                   queue=queue, waits=list(waits), signals=list(signals))
    a = ins("sp", "dma", dst=sb(0, 8, 0, [[1, 512]]), src=hb("x", 0, [[512, 8], [1, 512]]), queue=0)  # ~1 us
    store = ins("sp", "dma", dst=hb("y", 0, [[64, 1], [1, 64]]), src=sb(0, 1, 8448, [[1, 64]]), queue=2,
                waits=[(2, 2)])
    prog = program([("x", "input", "f32", (8, 512)), ("y", "output", "f32", (1, 64))],
                   [a, load(1, 4096, 1, signals=[1]), load(2, 8192, 0, waits=[(1, 1)]),
                    load(3, 8448, 0, signals=[2]), load(4, 8704, 0, signals=[2]), store])
    tl = _compare(prog)
    a, b, c, e = 0, 2, 3, 4
    assert tl.start[c] < tl.transfer_end[a] < tl.transfer_start[b]  # C triggered while A runs; B arrives after
    assert tl.transfer_start[c] == tl.transfer_end[b] and tl.transfer_start[e] == tl.transfer_end[c]
    assert tl.transfer_start[b] == tl.end[b] + load_target("trn1").data["dma"]["fixed_cost_ns"]
