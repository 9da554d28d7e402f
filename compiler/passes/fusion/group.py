"""What the fusion phases share: a group of instructions to fuse, and one recorded decision."""

from __future__ import annotations

from dataclasses import dataclass

from hlo.ir import Instruction


@dataclass(frozen=True)
class FusionDecision:
    """One producer/consumer pair the fusion pass considered (instruction names, without ``%``)."""

    producer: str
    consumer: str
    fused: bool
    reason: str
    kind: str = ""  # kOutput or kLoop: the fusion being grown

    def __str__(self) -> str:
        verdict = "FUSED  " if self.fused else "REFUSED"
        return f"{verdict} {self.kind:<7} %{self.producer} -> %{self.consumer}: {self.reason}"


@dataclass
class FusionGroup:
    """Instructions to fuse: ``root`` plus members; ``shared`` members stay in place for other users;
    ``name``: the fused computation's name prefix when it tells the backend which kernel (kCustom)."""

    root: Instruction
    kind: str
    members: dict[int, Instruction]
    shared: set[int]
    name: str = ""
