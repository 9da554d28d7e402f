"""Estimated instruction durations (ns) from the target file, for scheduling and engine balancing.

The figures follow machine-model.md: matmul initiation interval max(N, 64) PE cycles (x4 for fp32),
LoadStationary a quarter of that, ACT/DVE/POOL ~N cycles (2N for two inputs) plus a fixed overhead,
DMA a fixed cost plus bytes over the per-queue bandwidth.
"""

from __future__ import annotations

from isa.instructions import OPCODES
from isa.program import Instruction
from isa.target import Target


class CostModel:
    def __init__(self, target: Target):
        self.target = target
        self.pe = target.data["pe"]
        self.stream = target.data["stream"]
        self.dma_cfg = target.data["dma"]

    def _cycles_ns(self, engine: str, cycles: float) -> float:
        return cycles / self.target.clock_ghz(engine)

    def duration(self, inst: Instruction) -> float:
        """Estimated busy time of `inst` on its engine (DMA: on its queue) in ns."""
        cost = OPCODES[inst.opcode].cost
        if cost in ("pe_matmul", "pe_load"):
            src = inst.operands["src"]
            n = src.free_size
            factor = self.pe["fp32_factor"] if src.dtype == "f32" else 1
            cycles = max(n, self.pe["min_interval"]) * factor
            if cost == "pe_load":
                cycles *= self.pe["load_fraction"]
            return self._cycles_ns("pe", cycles)
        if cost in ("stream1", "stream2"):
            ref = inst.operands.get("src") or inst.operands.get("a") or inst.operands["dst"]
            n = ref.free_size * (2 if cost == "stream2" else 1)
            return self._cycles_ns(inst.engine, n + self.stream["overhead_cycles"])
        if cost == "dma":
            return self.dma_ns(inst)
        return self._cycles_ns(inst.engine, self.target.data.get("sync_cycles", 8))

    def dma_ns(self, inst: Instruction) -> float:
        dst = inst.operands["dst"]
        src = inst.operands["src"]
        runs = max(_runs(dst), _runs(src))
        nbytes = dst.nbytes + runs * self.dma_cfg.get("descriptor_overhead_bytes", 0)
        return self.dma_cfg["fixed_cost_ns"] + nbytes / self.dma_cfg["queue_bytes_per_ns"]

    def trigger_ns(self) -> float:
        return self._cycles_ns("sp", self.dma_cfg.get("trigger_cycles", 32))


def _runs(ap) -> int:
    """Number of contiguous runs (descriptors) of an access pattern."""
    per_partition = max(1, ap.free_size * ap.itemsize // max(1, ap.contiguous_bytes()))
    return ap.partitions * per_partition
