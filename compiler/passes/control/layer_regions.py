"""Finding repeated layers in the entry computation and how their inputs and outputs connect (for LayerRoller).

A *region* is the set of entry instructions of one layer, in entry order. Regions come from the frontend's
metadata when it is there: an instruction whose ``module`` path (``h.3.attn``, ``transformer.h.3``,
``model.layers.3.mlp``) has a numeric component belongs to layer 3 of the module list before it (``h``).
Without such metadata, the tandem repeat of compiler/passes/structural.py (``repeated_blocks``) proposes the
blocks. Parameters and constants are never in a region: they are its inputs.

Two regions are structurally identical when their instruction signatures (opcode, shape, attributes, called
computations by structural hash; not names, metadata or constant values) and their operand wiring (an operand
inside the region by position, one outside as an input slot numbered in order of first use, with its shape
and whether it is a constant) are equal: ``region_key``.

For a run of k identical regions, ``connect`` classifies every input slot:
- ``carried``: in layer j >= 1 it is layer j-1's instruction at one fixed position (the hidden state), in
  layer 0 an instruction outside the run (the initial value);
- ``invariant``: the same instruction in every layer (the attention mask); a constant is cloned into the
  loop body, anything else becomes loop state that does not change;
- ``stacked``: a constant per layer, all of one shape (the weights): stacked into one [k, ...] constant;
and every output position (an instruction used outside its region) as carried (the next layer's input; the
last layer's value is the loop's result) and/or stacked (used elsewhere, e.g. a KV cache's present keys:
each layer's value is written into a [k, ...] loop state). Anything else gets a reason, and the run is not
rolled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from compiler.passes.structural import block_key, repeated_blocks, shape_key
from hlo.ir import Computation, Instruction

LAYER_PATH = re.compile(r"^(?P<prefix>[A-Za-z_][\w.]*?)\.(?P<index>\d+)(?:\.|$)")
OUTSIDE = frozenset({"parameter", "constant"})  # never part of a region: its inputs
MIN_LAYERS = 2
MATMULS = frozenset({"dot", "convolution"})


def layer_of(inst: Instruction) -> tuple[str, int] | None:
    """(module list, layer index) of an instruction from its ``module`` metadata (``h.3.attn`` -> (h, 3))."""
    path = inst.metadata.get("module") if inst.metadata else None
    if not isinstance(path, str):
        return None
    m = LAYER_PATH.match(path)
    return (m.group("prefix"), int(m.group("index"))) if m else None


def input_free(comp: Computation) -> set[int]:
    """uids of the instructions that depend on no parameter (constants, their broadcasts, iotas...)."""
    free: set[int] = set()
    for inst in comp.instructions:
        if inst.opcode != "parameter" and all(o.uid in free for o in inst.operands):
            free.add(inst.uid)
    return free


def metadata_layers(comp: Computation) -> dict[str, dict[int, list[Instruction]]]:
    """Per module list (prefix), the instructions of each layer, in entry order. A value the first layer
    computes for all of them (CSE merged the layers' equal masks, broadcasts, rotary tables into the first
    one) is left out, with what only it uses: it is an invariant input of every layer. Such a value is one
    used by a later layer other than the next one, or by two or more other layers, or used by another layer
    and computed from no parameter or through no matmul of its layer (a layer's hidden state goes through
    its matmuls: the next layer's use of it is not shared)."""
    free = input_free(comp)
    layer_at: dict[int, tuple[str, int]] = {}
    for inst in comp.instructions:
        layer = layer_of(inst) if inst.opcode not in OUTSIDE else None
        if layer is not None:
            layer_at[inst.uid] = layer
    through_matmul: set[int] = set()  # depends on a matmul of its own layer (the hidden state does)
    for inst in comp.instructions:
        here = layer_at.get(inst.uid)
        if here is not None and (inst.opcode in MATMULS or any(
                o.uid in through_matmul and layer_at.get(o.uid) == here for o in inst.operands)):
            through_matmul.add(inst.uid)
    users = comp.users()
    shared: set[int] = set()
    for inst in reversed(comp.instructions):  # users before operands: a dropped user drops its operands
        here = layer_at.get(inst.uid)
        if here is None:
            continue
        mine = [u for u in users.get(inst, []) if u.uid not in shared and layer_at.get(u.uid) == here]
        others = {layer_at[u.uid][1] for u in users.get(inst, [])
                  if u.uid in layer_at and layer_at[u.uid][0] == here[0] and layer_at[u.uid] != here}
        if others and (len(others) > 1 or others != {here[1] + 1} or inst.uid in free
                       or inst.uid not in through_matmul):
            shared.add(inst.uid)
        elif not mine and any(u.uid in shared for u in users.get(inst, [])):
            shared.add(inst.uid)  # used only by shared values (and outside the layers)
    groups: dict[str, dict[int, list[Instruction]]] = {}
    for inst in comp.instructions:
        layer = layer_at.get(inst.uid)
        if layer is not None and inst.uid not in shared:
            groups.setdefault(layer[0], {}).setdefault(layer[1], []).append(inst)
    return groups


def hashed_layers(comp: Computation) -> dict[int, list[Instruction]]:
    """The blocks of the computation's longest tandem repeat (structural.repeated_blocks), constants and
    parameters left out; empty when there is none."""
    blocks = repeated_blocks(comp)
    if blocks is None:
        return {}
    insts = comp.instructions
    return {j: [i for i in insts[a:b] if i.opcode not in OUTSIDE] for j, (a, b) in enumerate(blocks.ranges())}


def region_key(region: list[Instruction], memo: dict[int, str]) -> tuple[Any, list[Instruction]]:
    """(the structural key of the region, its inputs by slot) (module doc)."""
    return block_key(region, memo, mark_constants=True)


def identical_runs(regions: dict[int, list[Instruction]]) -> tuple[list[list[int]], str]:
    """Maximal runs (>= 2) of consecutive layer indices whose regions are structurally identical, longest
    first; and a reason when there is none."""
    memo: dict[int, str] = {}
    keys = {j: region_key(r, memo)[0] for j, r in regions.items()}
    runs: list[list[int]] = []
    current: list[int] = []
    for j in sorted(regions):
        if current and j == current[-1] + 1 and keys[j] == keys[current[-1]]:
            current.append(j)
        else:
            if len(current) >= MIN_LAYERS:
                runs.append(current)
            current = [j]
    if len(current) >= MIN_LAYERS:
        runs.append(current)
    runs.sort(key=len, reverse=True)
    if runs:
        return runs, ""
    if not regions:
        return [], "no repeated layers"
    if len(regions) < MIN_LAYERS:
        return [], f"only {len(regions)} layer"
    order = sorted(regions)
    first = next((a, b) for a, b in zip(order, order[1:], strict=False) if b != a + 1 or keys[a] != keys[b])
    if first[1] != first[0] + 1:
        return [], f"layers {first[0]} and {first[1]} are not consecutive"
    sizes = (len(regions[first[0]]), len(regions[first[1]]))
    return [], f"layers {first[0]} and {first[1]} differ in structure ({sizes[0]} vs {sizes[1]} instructions)"


@dataclass
class Connection:
    """How a run of identical regions connects to the rest of the computation (module doc)."""

    regions: list[list[Instruction]]
    inputs: list[list[Instruction]]  # per layer, per slot
    slot_kind: list[str] = field(default_factory=list)  # carried / invariant / stacked
    carried_from: dict[int, int] = field(default_factory=dict)  # slot -> output position it takes
    outputs: list[int] = field(default_factory=list)  # positions used outside their region
    stacked_outputs: list[int] = field(default_factory=list)  # positions whose every layer's value is kept
    external: dict[tuple[int, int], list[Instruction]] = field(default_factory=dict)  # (layer, pos) -> users


def _downstream(comp: Computation, users: dict[Instruction, list[Instruction]],
                seeds: list[Instruction]) -> set[int]:
    seen: set[int] = set()
    stack = list(seeds)
    while stack:
        inst = stack.pop()
        for u in users.get(inst, []):
            if u.uid not in seen:
                seen.add(u.uid)
                stack.append(u)
    return seen


def connect(comp: Computation, regions: list[list[Instruction]]) -> tuple[Connection | None, str]:
    """The Connection of a run of structurally identical regions, or (None, the reason it cannot be rolled)."""
    memo: dict[int, str] = {}
    inputs = [region_key(r, memo)[1] for r in regions]
    k = len(regions)
    conn = Connection(regions, inputs)
    position = [{inst.uid: p for p, inst in enumerate(r)} for r in regions]
    members = {inst.uid for r in regions for inst in r}
    users = comp.users()
    after = _downstream(comp, users, [i for r in regions for i in r])
    for s in range(len(inputs[0])):
        xs = [inputs[j][s] for j in range(k)]
        prev = [position[j - 1].get(xs[j].uid) for j in range(1, k)]
        if all(x is xs[0] for x in xs):
            if xs[0].uid in members or xs[0].uid in after:
                return None, f"input {s} ({xs[0].name}) is computed from a layer of the run"
            conn.slot_kind.append("invariant")
        elif prev[0] is not None and all(p == prev[0] for p in prev):
            if xs[0].uid in members or xs[0].uid in after:
                return None, f"the first layer's input {s} ({xs[0].name}) is computed inside the run"
            conn.slot_kind.append("carried")
            conn.carried_from[s] = prev[0]
        elif all(x.opcode == "constant" and x.literal is not None for x in xs):
            if len({shape_key(x.shape) for x in xs}) != 1 or xs[0].shape.is_tuple:
                return None, f"the weights of input {s} differ in shape or layout"
            layout = xs[0].shape.layout
            if layout is not None and tuple(layout) != tuple(range(xs[0].shape.rank - 1, -1, -1)):
                return None, f"the weights of input {s} ({xs[0].name}) have a non-default layout"
            conn.slot_kind.append("stacked")
        else:
            return None, (f"input {s} ({', '.join(x.name for x in xs[:3])}...) differs per layer and is neither "
                          "a weight constant nor the previous layer's output")
    carried_positions = set(conn.carried_from.values())
    used_by_next = {(j, p) for j in range(k - 1) for s, p in conn.carried_from.items()}
    outputs: set[int] = set()
    for j, region in enumerate(regions):
        nxt = {i.uid for i in regions[j + 1]} if j + 1 < k else set()
        mine = position[j]
        for p, inst in enumerate(region):
            ext = [u for u in users.get(inst, []) if u.uid not in mine and u.uid not in nxt]
            if comp.root is inst:
                ext.append(inst)  # the ROOT: its replacement becomes the ROOT
            if any(u.uid in nxt for u in users.get(inst, [])) and (j, p) not in used_by_next:
                return None, f"layer {j + 1} reads {inst.name} of layer {j}, which is not its carried input"
            if ext:
                conn.external[(j, p)] = ext
                outputs.add(p)
    conn.outputs = sorted(outputs | carried_positions)
    conn.stacked_outputs = sorted(p for p in outputs if any(
        (j, p) in conn.external and (p not in carried_positions or j < k - 1) for j in range(k)))
    if not conn.carried_from and not conn.stacked_outputs:
        return None, "the layers pass nothing from one to the next"
    return conn, ""
