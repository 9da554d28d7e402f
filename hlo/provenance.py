"""Provenance: where in the torch model an HLO instruction came from, kept in its metadata.

Metadata keys (printed and parsed like XLA's ``metadata={op_name=... source_file=... source_line=...}``):

- ``op_name``: the ATen op (``aten.addmm``; a graph input's or weight's name for parameters/constants);
- ``module``: the torch module path of the fx node (``h.0.attn.c_attn``; absent at the model's top level);
- ``source_file``, ``source_line``: the innermost user frame of the node's stack trace;
- ``merged``: the origins of instructions merged into this one (CSE keeps one of two equal
  instructions, constant folding one constant for a chain), as ``MODULE|OP|FILE:LINE`` entries
  separated by ``;``.

A fusion keeps the origins of all it fused: its fused computation's instructions keep their own
metadata (``all_provenances`` walks them).
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.ir import Computation, Instruction

MERGED_KEY = "merged"
_FIELD_SEP, _ENTRY_SEP = "|", ";"


@dataclass(frozen=True)
class Provenance:
    """One torch origin: module path, ATen op and ``file:line`` (each "" when unknown)."""

    module: str = ""
    op: str = ""
    location: str = ""

    def encode(self) -> str:
        return _FIELD_SEP.join((self.module.replace(_FIELD_SEP, "/"), self.op.replace(_FIELD_SEP, "/"),
                                self.location.replace(_ENTRY_SEP, ",")))

    @staticmethod
    def decode(text: str) -> Provenance:
        parts = text.split(_FIELD_SEP, 2)
        return Provenance(*parts) if len(parts) == 3 else Provenance(location=text)

    def __bool__(self) -> bool:
        return bool(self.module or self.op or self.location)


def own_provenance(inst: Instruction) -> Provenance:
    """The origin the instruction was lowered from (its own metadata, not the merged ones)."""
    meta = inst.metadata
    location = ""
    if meta.get("source_file"):
        location = f"{meta['source_file']}:{meta['source_line']}" if "source_line" in meta else str(meta["source_file"])
    return Provenance(str(meta.get("module", "")), str(meta.get("op_name", "")), location)


def provenances(inst: Instruction) -> tuple[Provenance, ...]:
    """Its own origin, then those merged into it; distinct, empty ones left out."""
    merged = str(inst.metadata.get(MERGED_KEY, ""))
    found = [own_provenance(inst), *(Provenance.decode(t) for t in merged.split(_ENTRY_SEP) if t)]
    return tuple(dict.fromkeys(p for p in found if p))


def merge_provenance(into: Instruction, other: Instruction) -> None:
    """Record ``other``'s origins on ``into`` (which stands for both from now on)."""
    have = provenances(into)
    extra = [p for p in provenances(other) if p not in have]
    if not extra:
        return
    own = own_provenance(into)
    kept = [p for p in have if p != own] + extra
    into.metadata[MERGED_KEY] = _ENTRY_SEP.join(p.encode() for p in kept)


def _fused(inst: Instruction) -> Computation | None:
    comp = inst.attrs.get("calls") if inst.opcode == "fusion" else None
    return comp if isinstance(comp, Computation) else None


def _constant_expression(inst: Instruction, memo: dict[int, bool]) -> bool:
    """Constants, iotas and what only they feed (e.g. a broadcast scalar, a causal mask)."""
    if inst.uid not in memo:
        memo[inst.uid] = False  # (a cycle cannot happen; this only stops a revisit)
        memo[inst.uid] = inst.opcode in ("constant", "iota") or (
            inst.opcode != "parameter" and bool(inst.operands)
            and all(_constant_expression(o, memo) for o in inst.operands))
    return memo[inst.uid]


def all_provenances(inst: Instruction) -> tuple[Provenance, ...]:
    """The instruction's origins (merged ones included) and, for a fusion, the own origin of every
    instruction it fused, nested fusions included. Left out: constant expressions (constants, iotas
    and what only they feed, inside the fusion or through its operands: a broadcast scalar, the
    causal mask), which CSE shares between the ops of every layer and the fusion pass then
    duplicates into each fusion; for the same reason, the origins CSE merged into a fused
    instruction; parameters (operands computed elsewhere) and the reducers reduce ops call (shared
    between ops). A fusion carries its root's metadata, merged origins included."""
    found = list(provenances(inst))
    memo: dict[int, bool] = {}
    stack = [(c, inst) for c in [_fused(inst)] if c is not None]
    while stack:
        comp, caller = stack.pop()
        for param in comp.parameters:
            number = param.parameter_number or 0
            if number < len(caller.operands) and _constant_expression(caller.operands[number], memo):
                memo[param.uid] = True
        for sub in comp.instructions:
            if sub.opcode != "parameter" and not _constant_expression(sub, memo):
                found.append(own_provenance(sub))
            nested = _fused(sub)
            if nested is not None:
                stack.append((nested, sub))
    return tuple(dict.fromkeys(p for p in found if p))
