"""Estimated instruction durations (ns) for scheduling and engine balancing.

The durations are the emulator's own timing rules (``isa.emulator.timing``, figures from the target
file and machine-model.md), so the scheduler's estimated timeline is the one the emulator will
follow when nothing else (HBM bandwidth sharing) interferes:
- PE: matmul initiation interval max(N, 64) cycles (x4 for fp32); LoadStationary a quarter of that,
  running in the background of the previous PE instruction.
- ACT/DVE/POOL: ~N cycles per input tile plus a fixed overhead, at the engine's clock; DVE pays a
  larger overhead when it depends on the instruction just before it.
- DMA: SP spends `trigger_ns` issuing it; the transfer reaches its queue `fixed_cost_ns` later and
  moves its effective bytes (descriptor overhead included) at the per-queue rate, capped by an even
  share of the core's HBM bandwidth over all queues.
"""

from __future__ import annotations

from dataclasses import replace

from isa.emulator.indirect import indirect_effective_bytes
from isa.emulator.timing import COSTS, dependent_extra, dma_effective_bytes
from isa.instructions import DMA_OPCODES, OPCODES
from isa.program import Instruction
from isa.target import Target


class CostModel:
    def __init__(self, target: Target):
        self.target = target
        self.dma_cfg = target.data["dma"]
        queues = self.dma_cfg["queues"]
        self.queue_rate = min(self.dma_cfg["queue_bytes_per_ns"], target.data["hbm"]["bytes_per_ns"] / queues)
        self.fixed_ns = self.dma_cfg["fixed_cost_ns"]
        self._transfers: dict = {}  # (dst, src) of a plain DMA -> its queue time (asked by bottom levels and placement)

    def duration(self, inst: Instruction, engine: str | None = None) -> float:
        """Estimated busy time of `inst` on its engine (or on `engine`); DMA: trigger + transfer."""
        if inst.opcode in DMA_OPCODES:
            return self.dma_ns(inst)
        return self.engine_ns(inst, engine)

    def engine_ns(self, inst: Instruction, engine: str | None = None,
                  previous: Instruction | None = None) -> float:
        """Time `inst` occupies `engine` (default: its own; DMA: the SP trigger only). `previous` is
        the instruction just before it on that engine (DVE's dependent overhead)."""
        if engine is not None and engine != inst.engine:
            inst = replace(inst, engine=engine)
        ns = COSTS[OPCODES[inst.opcode].cost](self.target, inst)
        if previous is not None:
            ns += dependent_extra(self.target, inst, previous)
        return ns

    def transfer_ns(self, inst: Instruction) -> float:
        """Queue time of a DMA's transfer (after it reached its queue)."""
        if inst.opcode == "dma_indirect":
            return indirect_effective_bytes(self.target, inst) / self.queue_rate
        key = (inst.operands["dst"], inst.operands["src"])
        ns = self._transfers.get(key)
        if ns is None:
            ns = self._transfers[key] = dma_effective_bytes(self.target, *key) / self.queue_rate
        return ns

    def dma_ns(self, inst: Instruction) -> float:
        """Trigger to completion of a DMA on an idle queue."""
        return self.trigger_ns() + self.fixed_ns + self.transfer_ns(inst)

    def trigger_ns(self) -> float:
        return self.dma_cfg["trigger_cycles"] / self.target.clock_ghz("sp")
