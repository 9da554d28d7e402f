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


@pytest.mark.parametrize("name", list(MODELS))
def test_queue_rate_path_matches_the_fair_share_path(name):
    prog = load(DATA / f"{name}.neff")
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
