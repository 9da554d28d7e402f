"""Structural hashing of HLO: equal hashes for subgraphs that compute the same thing on other data.

A structural hash ignores instruction names, metadata and constant values (a constant is hashed by its
shape and dtype only: the weights of two transformer blocks differ, their structure does not), and
includes every opcode, result shape (dtype, dims, layout), attribute (a called computation by its own
structural hash; the ``data`` key naming a constant's bytes is a name and is left out), operand order,
and, for a parameter, its number.

- `instruction_hashes(computation)`: the Merkle hash of every instruction (its signature and its
  operands' hashes): two instructions hash equal when the graphs below them are the same up to names
  and constant values.
- `computation_hash(computation)`: the hash of its ROOT (a fusion's fused computation, a reducer).
- `block_hash(instructions)`: the hash of a sequence of instructions as a subgraph: an operand from
  outside the sequence counts as an input, numbered in order of first use and hashed by its shape.
- `repeated_blocks(computation)`: the longest run of structurally identical consecutive blocks of
  the computation's instructions (the N layers of a transformer, the repeated stages of a CNN), found
  as a tandem repeat of per-instruction signatures (operands by shape) and confirmed with `block_hash`.

These are the analysis the repeated-layer reuse of issue 16 needs (lower and schedule one block, replay
it for the others); the backend does not use it yet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hlo.ir import Computation, Instruction, Shape

IGNORED_ATTRS = frozenset({"data"})  # the name of a constant's data, not its structure


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def shape_key(shape: Shape) -> Any:
    """dtype, dims and layout of an array shape; the element shapes of a tuple."""
    if shape.tuple_shapes is not None:
        return ("tuple", tuple(shape_key(s) for s in shape.tuple_shapes))
    return (shape.dtype, tuple(shape.dims), None if shape.layout is None else tuple(shape.layout))


def _attr_key(value: Any, memo: dict[int, str]) -> Any:
    if isinstance(value, Computation):
        return ("computation", computation_hash(value, memo))
    if isinstance(value, (tuple, list)):
        return tuple(_attr_key(v, memo) for v in value)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape)
    return repr(value)


def signature(inst: Instruction, memo: dict[int, str] | None = None) -> Any:
    """What the structural hash sees of one instruction apart from its operands."""
    memo = {} if memo is None else memo
    attrs = tuple(sorted((k, _attr_key(v, memo)) for k, v in inst.attrs.items() if k not in IGNORED_ATTRS))
    return (inst.opcode, shape_key(inst.shape), attrs, inst.parameter_number)


def instruction_hashes(computation: Computation, memo: dict[int, str] | None = None) -> dict[int, str]:
    """uid -> structural hash of every instruction of `computation` (over the graph below it)."""
    memo = {} if memo is None else memo
    hashes: dict[int, str] = {}
    for inst in computation.post_order():
        hashes[inst.uid] = _digest(signature(inst, memo), tuple(hashes[o.uid] for o in inst.operands))
    return hashes


def computation_hash(computation: Computation, memo: dict[int, str] | None = None) -> str:
    """The structural hash of a computation (of its ROOT); `memo` caches called computations by id."""
    memo = {} if memo is None else memo
    key = id(computation)
    if key not in memo:
        root = computation.root
        assert root is not None, f"computation {computation.name} has no ROOT"
        memo[key] = instruction_hashes(computation, memo)[root.uid]
    return memo[key]


def block_key(instructions: Sequence[Instruction], memo: dict[int, str] | None = None, *,
              mark_constants: bool = False) -> tuple[tuple[Any, ...], list[Instruction]]:
    """(the structural key of `instructions` as one subgraph, its inputs in order of first use): each
    instruction by its signature and its operands, an operand inside the block by its position in the
    block, one outside as an input (numbered in order of first use, keyed by its shape, and by whether it
    is a constant when `mark_constants`)."""
    memo = {} if memo is None else memo
    position = {inst.uid: i for i, inst in enumerate(instructions)}
    slots: dict[int, int] = {}
    inputs: list[Instruction] = []
    parts = []
    for inst in instructions:
        operands: list[tuple[Any, ...]] = []
        for o in inst.operands:
            if o.uid in position:
                operands.append(("at", position[o.uid]))
                continue
            if o.uid not in slots:
                slots[o.uid] = len(inputs)
                inputs.append(o)
            mark = (o.opcode == "constant",) if mark_constants else ()
            operands.append(("input", slots[o.uid], shape_key(o.shape), *mark))
        parts.append((signature(inst, memo), tuple(operands)))
    return tuple(parts), inputs


def block_hash(instructions: Sequence[Instruction], memo: dict[int, str] | None = None) -> str:
    """The structural hash of `instructions` as one subgraph (`block_key`)."""
    return _digest(block_key(instructions, memo)[0])


@dataclass(frozen=True)
class Blocks:
    """`count` consecutive blocks of `length` instructions from `start` (in computation order), all with
    the structural hash `hash`."""

    start: int
    length: int
    count: int
    hash: str

    def ranges(self) -> list[tuple[int, int]]:
        return [(self.start + j * self.length, self.start + (j + 1) * self.length) for j in range(self.count)]


def _local_signatures(instructions: Sequence[Instruction], memo: dict[int, str]) -> np.ndarray:
    """Per instruction, a 63-bit hash of its signature and its operands' shapes (not what or where they are:
    a value all layers read, such as an attention mask, is further back for each layer, and the first
    layer reads a parameter where the others read the previous layer)."""
    out = np.empty(len(instructions), dtype=np.int64)
    for i, inst in enumerate(instructions):
        operands = tuple(shape_key(o.shape) for o in inst.operands)
        out[i] = int(_digest(signature(inst, memo), operands)[:15], 16)
    return out


def _candidates(seq: np.ndarray, min_count: int, min_length: int) -> list[tuple[int, int, int, int]]:
    """(-covered, length, start, count) of the longest tandem repeat for every block length, best first."""
    n = len(seq)
    found = []
    for p in range(min_length, n // min_count + 1):
        same = seq[:-p] == seq[p:]
        if not same.any():
            continue
        # the longest run of positions i with seq[i] == seq[i + p]
        edges = np.diff(np.concatenate(([0], same.view(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        k = int(np.argmax(ends - starts))
        run, s = int(ends[k] - starts[k]), int(starts[k])
        count = (run + p) // p
        if count >= min_count:
            found.append((-(count * p), p, s, count))
    return sorted(found)


def repeated_blocks(computation: Computation, min_count: int = 2, min_length: int = 2,
                    tries: int = 8) -> Blocks | None:
    """The longest stretch of the computation's instructions made of `count` >= `min_count` consecutive,
    structurally identical blocks (`block_hash`) of `length` >= `min_length` instructions: most
    instructions covered; of equal cover, the shortest block. None when there is no such repeat.

    Candidates come from a tandem repeat of per-instruction signatures (`tries` of them, best first);
    each is confirmed with `block_hash`, keeping its longest run of consecutive equal blocks."""
    instructions = list(computation.instructions)
    memo: dict[int, str] = {}
    best: Blocks | None = None
    for _, p, s, count in _candidates(_local_signatures(instructions, memo), min_count, min_length)[:tries]:
        if best is not None and count * p <= best.count * best.length:
            break
        hashes = [block_hash(instructions[s + j * p:s + (j + 1) * p], memo) for j in range(count)]
        run_start, run, j0 = 0, 0, 0
        for j in range(1, count + 1):  # the longest run of equal consecutive block hashes
            if j == count or hashes[j] != hashes[j - 1]:
                if j - j0 > run:
                    run_start, run = j0, j - j0
                j0 = j
        if run >= min_count and (best is None or run * p > best.count * best.length):
            best = Blocks(s + run_start * p, p, run, hashes[run_start])
    return best


def hashes_of(computations: Iterable[Computation]) -> list[str]:
    """The structural hash of each computation (one memo for the called computations they share)."""
    memo: dict[int, str] = {}
    return [computation_hash(c, memo) for c in computations]
