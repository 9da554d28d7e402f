"""The cost model of the ``cost`` fusion strategy: HBM bytes moved and SBUF working set.

Greedy fusion (XLA's) fuses a producer only into a consumer that is its only user; anything used twice is
written to memory once and read back by each user. The cost strategy also *duplicates* an elementwise
producer into a consumer's fusion when recomputing it there costs fewer HBM bytes than reading its value:
the fusion then reads the producer's operands (those it does not read already) instead of the producer's
result. When every user has duplicated it, the producer is never materialized. Fusions still grow only
while one kernel can hold their working set (fusion_rows.space_reason): e.g. a softmax whose rows do not
fit becomes max / sum(exp) / exp-and-normalize kernels that each recompute exp instead of writing it.
"""

from __future__ import annotations

from hlo.ir import Instruction
from hlo.opcodes import is_elementwise

CHEAP = ("broadcast", "constant", "iota")  # operands a fusion reads as views or immediates


def nbytes(inst: Instruction) -> int:
    return 0 if inst.shape.is_tuple else inst.shape.nbytes


def duplication(producer: Instruction, members: dict[int, Instruction], weight: float = 1.0) -> tuple[bool, str]:
    """Should `producer` (also used outside the fusion of `members`) be recomputed inside it? Yes when that
    reads at most `weight` x the bytes of its value (--fusion-recompute-weight)."""
    if not is_elementwise(producer):
        return False, f"producer %{producer.name} ({producer.opcode}) is not recomputed (only elementwise ops are)"
    read = {o.uid for m in members.values() for o in m.operands if o.uid not in members}
    extra = sum(nbytes(o) for o in dict.fromkeys(producer.operands)
                if o.uid not in members and o.uid not in read and o.opcode not in CHEAP)
    value = nbytes(producer)
    if extra > weight * value:
        return False, (f"recomputing %{producer.name} would read {extra} more bytes than its {value}-byte value "
                       "(kept materialized)")
    return True, (f"duplicated: recomputing reads {extra} more bytes, reading its value {value} "
                  "(the original stays for its other users)")
