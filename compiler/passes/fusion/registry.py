"""The fusion strategies, by name (`--fusion NAME`, `compiler.compile(..., fusion=NAME)`; docs/plugins.md).

A strategy steers the fusion pass; it never makes it unsafe: the pass's own checks (what one kernel of the
backend can compute, fusion_rows.space_reason, the epilogue ops PE's evacuation applies) run first, and a
strategy only decides among the fusions they allow.

    from compiler.passes.fusion.registry import FusionStrategy, register_fusion_strategy

    def allow(producer, consumer, kind, members):   # hlo.ir.Instructions; kind kOutput / kLoop / kInput
        return None if len(members) < 4 else "at most 4 instructions per fusion"

    register_fusion_strategy(FusionStrategy("small", allow=allow, description="fusions of <= 4 ops"))

Fields: which phases run (prepare, attention, epilogue, loop: fusion_pass.py's docstring), `allow`
(`(producer, consumer, kind, members) -> None` to let `producer` join the fusion being grown from
`consumer`, or the reason it may not, recorded in fusion_decisions.txt with the strategy's name), and
`duplicate` (`(producer, members, weight) -> (bool, reason)`: when a fusion stops growing, recompute inside
it a producer that still has users outside; `weight` is --fusion-recompute-weight; None: never, as greedy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backend.registry import Registry
from compiler.passes.fusion.cost import duplication
from hlo.ir import Instruction

Allow = Callable[[Instruction, Instruction, str, list[Instruction]], "str | None"]
Duplicate = Callable[[Instruction, dict[int, Instruction], float], tuple[bool, str]]


@dataclass(frozen=True)
class FusionStrategy:
    name: str
    description: str = ""
    prepare: bool = True
    attention: bool = True
    epilogue: bool = True
    loop: bool = True
    allow: Allow | None = None
    duplicate: Duplicate | None = None

    @property
    def runs(self) -> bool:
        """Whether the fusion pass has anything to do (`none` leaves it out of the pipeline)."""
        return self.prepare or self.attention or self.epilogue or self.loop


FUSION_STRATEGIES: Registry[FusionStrategy] = Registry("fusion strategy", "fusion")


def register_fusion_strategy(strategy: FusionStrategy, origin: str = "plug-in") -> FusionStrategy:
    if not isinstance(strategy, FusionStrategy):
        raise TypeError(f"register_fusion_strategy takes a FusionStrategy, got {type(strategy).__name__}")
    return FUSION_STRATEGIES.register(strategy.name, strategy, origin)


FUSION_STRATEGIES.register("greedy", FusionStrategy(
    "greedy", "XLA's producer/consumer fusion: a producer joins only a fusion holding all its users"))
FUSION_STRATEGIES.register("cost", FusionStrategy(
    "cost", "greedy, plus recomputing an elementwise producer inside a fusion when that reads fewer HBM bytes",
    duplicate=duplication))
FUSION_STRATEGIES.register("none", FusionStrategy(
    "none", "no fusion: every op is its own kernel", prepare=False, attention=False, epilogue=False, loop=False))
