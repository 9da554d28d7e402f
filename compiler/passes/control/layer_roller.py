"""Repeated layers rolled into a counted ``while`` loop, so that the backend lowers and schedules one layer.

The N blocks of a transformer are N copies of one subgraph that differ only in their weights. This pass finds
a run of k >= 2 consecutive structurally identical layers (compiler/passes/control/layer_regions.py: regions
from the frontend's ``module`` metadata, else from structural hashing), and rewrites the run as

    state = tuple(i = 0, carried initial values..., invariant values..., zeros [k, ...] per stacked output)
    while (i < k):  one layer, reading
        - each weight family from one stacked [k, ...] constant: dynamic-slice at i, reshaped;
        - the previous layer's output (the hidden state) and the loop invariants from the state;
      and writing its carried output into the state, and each stacked output (a KV cache's present keys,
      a hidden state the model also returns) at row i of its [k, ...] state with dynamic-update-slice

and every use after the run reads the loop's result (the last layer's carried output, or row j of a stacked
output). The backend compiles the counted loop with the ISA's loop instructions and the body once
(backend/control.py). The loop costs simulated time (per trip: the weights are copied out of the stack,
a barrier between trips, no overlap of one layer's tail with the next one's head), so the pass is a compile
option (``roll_layers``, off by default; docs/middle-end.md has the measured cost).

It runs after the simplification fixed point and before fusion (fusion also fuses loop bodies): the layers are
plain ops there, and their weights are entry constants. Why a candidate was not rolled is recorded
(``decision_lines``), like fusion decisions.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from compiler.passes.control.layer_regions import (
    Connection,
    connect,
    hashed_layers,
    identical_runs,
    input_free,
    metadata_layers,
)
from compiler.passes.interface import HloPass
from compiler.passes.structural import block_key
from compiler.passes.utils import new_instruction
from hlo.ir import Computation, Instruction, Module, Shape, SliceSpec, numpy_dtype

COUNTER = "s32"


class LayerRoller(HloPass):
    name = "roll_layers"

    def __init__(self, min_layers: int = 2):
        self.min_layers = min_layers
        self.decisions: list[str] = []

    def decision_lines(self) -> list[str]:
        return list(self.decisions)

    def run(self, module: Module) -> bool:
        self.decisions = []
        comp = module.entry
        if comp is None:
            return False
        changed = False
        tried: set[str] = set()
        while True:
            by_metadata = metadata_layers(comp)
            candidates = [(f"layers {p}.*", layers) for p, layers in sorted(by_metadata.items())]
            candidates = [(n, lay) for n, lay in candidates if n not in tried]
            if not by_metadata and "hashed blocks" not in tried:  # no module paths: structural hashing
                candidates = [("hashed blocks", hashed_layers(comp))]
            if not candidates:
                return changed
            name, layers = candidates[0]
            tried.add(name)
            changed |= self._try(module, comp, name, layers)

    def _try(self, module: Module, comp: Computation, name: str, layers: dict[int, list[Instruction]]) -> bool:
        runs, reason = identical_runs(layers)
        runs = [r for r in runs if len(r) >= self.min_layers]
        if not runs:
            why = reason or f"fewer than {self.min_layers} identical consecutive layers"
            self.decisions.append(f"roll_layers: {name}: not rolled: {why}")
            return False
        run = runs[0]
        conn, reason = connect(comp, [layers[j] for j in run])
        if conn is None:
            self.decisions.append(f"roll_layers: {name} {run[0]}..{run[-1]}: not rolled: {reason}")
            return False
        _Rewrite(module, comp, conn, f"{name.split()[-1].rstrip('.*')}.{run[0]}-{run[-1]}").apply()
        kinds = {kind: conn.slot_kind.count(kind) for kind in ("carried", "invariant", "stacked")}
        self.decisions.append(
            f"roll_layers: {name} {run[0]}..{run[-1]}: rolled {len(run)} layers of {len(conn.regions[0])} "
            f"instructions into a loop ({kinds['stacked']} stacked weights, {kinds['carried']} carried, "
            f"{kinds['invariant']} invariant inputs, {len(conn.stacked_outputs)} stacked outputs)")
        return True


class _Rewrite:
    """The loop that replaces one run (module doc)."""

    def __init__(self, module: Module, comp: Computation, conn: Connection, label: str):
        self.module, self.comp, self.conn, self.label = module, comp, conn, label
        self.k = len(conn.regions)
        self.free = input_free(comp)

    def _new(self, opcode: str, shape: Shape, operands: list[Instruction], attrs: dict[str, Any] | None = None,
             literal: np.ndarray | None = None, name: str | None = None,
             metadata: dict[str, Any] | None = None) -> Instruction:
        return new_instruction(self.module, opcode, shape, operands, attrs, metadata, literal, name)

    def _scalar(self, value: int, dtype: str = COUNTER) -> Instruction:
        return self._new("constant", Shape.array(dtype, ()), [], literal=np.array(value, dtype=numpy_dtype(dtype)))

    def apply(self) -> None:
        conn, k = self.conn, self.k
        template = conn.regions[0]
        carried = [s for s, kind in enumerate(conn.slot_kind) if kind == "carried"]
        invariant = [s for s, kind in enumerate(conn.slot_kind)
                     if kind == "invariant" and conn.inputs[0][s].uid not in self.free]
        stacked_out = conn.stacked_outputs
        # state: counter, carried..., invariants..., stacked outputs...
        element: dict[tuple[str, int], int] = {}
        shapes = [Shape.array(COUNTER, ())]
        for s in carried:
            element[("carried", s)] = len(shapes)
            shapes.append(conn.inputs[0][s].shape)
        for s in invariant:
            element[("invariant", s)] = len(shapes)
            shapes.append(conn.inputs[0][s].shape)
        for p in stacked_out:
            element[("out", p)] = len(shapes)
            shapes.append(self._output_rows(template[p].shape, self.k))
        state_shape = Shape.tuple_of(shapes)
        body = self._body(state_shape, element, carried, invariant)
        cond = self._condition(state_shape)
        # the entry: initial state, the loop, its results
        new: list[Instruction] = []
        init = [self._scalar(0)]
        new.append(init[0])
        for s in carried:
            init.append(conn.inputs[0][s])
        for s in invariant:
            init.append(conn.inputs[0][s])
        for p in stacked_out:
            shape = template[p].shape
            zero = self._scalar(0, shape.dtype)
            zeros = self._new("broadcast", self._output_rows(shape, self.k), [zero], {"dimensions": ()})
            new += [zero, zeros]
            init.append(zeros)
        meta = {"op_name": f"rolled {self.label}"}
        state = self._new("tuple", state_shape, init, name=f"{self.label}.init", metadata=meta)
        loop = self._new("while", state_shape, [state], {"condition": cond, "body": body},
                         name=f"{self.label}.loop", metadata=meta)
        new += [state, loop]
        replacement: dict[int, Instruction] = {}
        last = conn.regions[-1]
        for s in carried:
            p = conn.carried_from[s]
            if (k - 1, p) in conn.external:
                e = element[("carried", s)]
                gte = self._new("get-tuple-element", shapes[e], [loop], {"index": e}, metadata=meta)
                new.append(gte)
                replacement[last[p].uid] = gte
        for p in stacked_out:
            e = element[("out", p)]
            gte = self._new("get-tuple-element", shapes[e], [loop], {"index": e}, metadata=meta)
            new.append(gte)
            shape = template[p].shape
            for j, region in enumerate(conn.regions):
                if (j, p) in conn.external and region[p].uid not in replacement:
                    rows = self._output_rows(shape, 1)
                    row = self._new("slice", rows, [gte], {"slice": _row_slice(rows, j)}, metadata=meta)
                    value = self._new("reshape", shape, [row], metadata=region[p].metadata)
                    new += [row, value]
                    replacement[region[p].uid] = value
        self._splice(new, replacement)

    @staticmethod
    def _output_rows(shape: Shape, layers: int) -> Shape:
        """`layers` values of `shape` as rows of its last axis ([layers * rows, last]): a layer's value is
        written (dynamic-update-slice at trip * rows) as many small rows, which the indirect DMA spreads over
        queues, not as one large row on one queue."""
        last = shape.dims[-1] if shape.rank else 1
        return Shape.array(shape.dtype, (layers * (shape.size // last if last else 0), last))

    def _stacked_shape(self, shape: Shape, rows: int | None = None) -> Shape:
        return Shape.array(shape.dtype, (self.k if rows is None else rows, *shape.dims))

    def _stacked_weight(self, x: Instruction, layers: list[Instruction], trip: Instruction, zero: Instruction,
                        add: Any) -> Instruction:
        """Layer `trip`'s weight: the layers' weights stacked along their first axis ([k * d0, d1, ...], so
        that the dynamic slice moves rows of d1... elements over several DMA queues), sliced at trip * d0."""
        stack = np.stack([np.asarray(w.literal) for w in layers])
        if x.shape.rank == 0:
            whole = add(self._new("constant", self._stacked_shape(x.shape), [], literal=stack,
                                  name=f"{x.name}.stacked", metadata=x.metadata))
            row = add(self._new("dynamic-slice", Shape.array(x.shape.dtype, (1,)), [whole, trip],
                                {"dynamic_slice_sizes": (1,)}, metadata=x.metadata))
            return add(self._new("reshape", x.shape, [row], metadata=x.metadata))
        d0, rest = x.shape.dims[0], tuple(x.shape.dims[1:])
        merged = Shape.array(x.shape.dtype, (self.k * d0, *rest))
        whole = add(self._new("constant", merged, [], literal=stack.reshape(merged.dims),
                              name=f"{x.name}.stacked", metadata=x.metadata))
        rows = add(self._scalar(d0))
        start = add(self._new("multiply", Shape.array(COUNTER, ()), [trip, rows], name=f"{x.name}.row"))
        return add(self._new("dynamic-slice", x.shape, [whole, start, *[zero] * len(rest)],
                             {"dynamic_slice_sizes": tuple(x.shape.dims)}, metadata=x.metadata))

    def _clone_free(self, x: Instruction, add: Any, memo: dict[int, Instruction]) -> Instruction:
        """A copy in the body of `x` and what it is computed from (constants only)."""
        if x.uid not in memo:
            ops = [self._clone_free(o, add, memo) for o in x.operands]
            memo[x.uid] = add(self._new(x.opcode, x.shape, ops, dict(x.attrs), literal=x.literal, name=x.name,
                                        metadata=x.metadata))
        return memo[x.uid]

    def _condition(self, state_shape: Shape) -> Computation:
        cond = Computation(self.module.unique_name(f"{self.label}.condition"))
        param = self._new("parameter", state_shape, [], name="state")
        param.parameter_number = 0
        i = self._new("get-tuple-element", Shape.array(COUNTER, ()), [param], {"index": 0}, name="trip")
        limit = self._scalar(self.k)
        root = self._new("compare", Shape.array("pred", ()), [i, limit], {"direction": "LT"}, name="more")
        cond.instructions = [param, i, limit, root]
        cond.root = root
        return self.module.add_computation(cond)

    def _body(self, state_shape: Shape, element: dict[tuple[str, int], int], carried: list[int],
              invariant: list[int]) -> Computation:
        conn = self.conn
        template = conn.regions[0]
        body = Computation(self.module.unique_name(f"{self.label}.body"))
        insts: list[Instruction] = []

        def add(inst: Instruction) -> Instruction:
            insts.append(inst)
            return inst

        param = add(self._new("parameter", state_shape, [], name="state"))
        param.parameter_number = 0
        trip = add(self._new("get-tuple-element", Shape.array(COUNTER, ()), [param], {"index": 0}, name="trip"))
        zero = add(self._scalar(0))
        slot_value: dict[int, Instruction] = {}
        cloned: dict[int, Instruction] = {}
        for s, kind in enumerate(conn.slot_kind):
            x = conn.inputs[0][s]
            if kind in ("carried", "invariant") and (kind, s) in element:
                e = element[(kind, s)]
                slot_value[s] = add(self._new("get-tuple-element", x.shape, [param], {"index": e}))
            elif kind == "invariant":  # computed from constants only (a mask, a broadcast): cloned
                slot_value[s] = self._clone_free(x, add, cloned)
            else:  # stacked weights, read at the trip counter
                slot_value[s] = self._stacked_weight(x, [conn.inputs[j][s] for j in range(self.k)], trip, zero, add)
        clone: dict[int, Instruction] = {}
        slots = _slot_map(template)
        for inst in template:
            ops = [clone[o.uid] if o.uid in clone else slot_value[slots[o.uid]] for o in inst.operands]
            clone[inst.uid] = add(self._new(inst.opcode, inst.shape, ops, dict(inst.attrs), literal=inst.literal,
                                            name=inst.name, metadata=inst.metadata))
        one = add(self._scalar(1))
        results: list[Instruction] = [add(self._new("add", Shape.array(COUNTER, ()), [trip, one], name="next_trip"))]
        for s in carried:
            results.append(clone[template[conn.carried_from[s]].uid])
        for s in invariant:
            results.append(slot_value[s])
        for p in conn.stacked_outputs:
            value = clone[template[p].uid]
            e = element[("out", p)]
            rows = self._output_rows(value.shape, 1)
            row = add(self._new("reshape", rows, [value]))
            whole = add(self._new("get-tuple-element", state_shape.tuple_shapes[e], [param], {"index": e}))
            first = add(self._scalar(rows.dims[0]))
            start = add(self._new("multiply", Shape.array(COUNTER, ()), [trip, first]))
            results.append(add(self._new("dynamic-update-slice", whole.shape, [whole, row, start, zero],
                                         metadata=value.metadata)))
        root = add(self._new("tuple", state_shape, results, name="next_state"))
        body.instructions = insts
        body.root = root
        return self.module.add_computation(body)

    def _splice(self, new: list[Instruction], replacement: dict[int, Instruction]) -> None:
        """Remove the run's instructions, add `new`, redirect uses, and restore defs-before-uses order."""
        comp = self.comp
        members = {i.uid for r in self.conn.regions for i in r}
        index = {inst.uid: n for n, inst in enumerate(comp.instructions)}
        at = max(index[uid] for uid in members)
        kept = [i for i in comp.instructions if i.uid not in members]
        for inst in kept:
            inst.operands = [replacement.get(o.uid, o) for o in inst.operands]
        if comp.root is not None and comp.root.uid in replacement:
            comp.root = replacement[comp.root.uid]
        # new instructions take the place of the run's last one; a stable topological sort fixes the rest
        rank = {i.uid: index[i.uid] * 2 for i in kept}
        rank.update({i.uid: at * 2 + 1 for i in new})
        comp.instructions = _stable_topological(kept + new, rank)


def _slot_map(region: list[Instruction]) -> dict[int, int]:
    """uid of each input of the region -> its slot (in order of first use, as layer_regions.region_key)."""
    return {o.uid: slot for slot, o in enumerate(block_key(region)[1])}


def _row_slice(rows: Shape, j: int) -> SliceSpec:
    """Layer j's rows of a stacked output ([k * n, last]; `rows`: one layer's [n, last])."""
    n, last = rows.dims
    return SliceSpec(((j * n, (j + 1) * n, 1), (0, last, 1)))


def _stable_topological(insts: list[Instruction], rank: dict[int, int]) -> list[Instruction]:
    """Defs before uses, otherwise by rank (then by position in `insts`)."""
    present = {i.uid for i in insts}
    pending = {i.uid: len({o.uid for o in i.operands if o.uid in present}) for i in insts}
    users: dict[int, list[Instruction]] = {}
    for i in insts:
        for uid in {o.uid for o in i.operands if o.uid in present}:
            users.setdefault(uid, []).append(i)
    order = {i.uid: n for n, i in enumerate(insts)}
    heap = [(rank[i.uid], order[i.uid], i.uid) for i in insts if pending[i.uid] == 0]
    heapq.heapify(heap)
    by_uid = {i.uid: i for i in insts}
    out: list[Instruction] = []
    while heap:
        _, _, uid = heapq.heappop(heap)
        out.append(by_uid[uid])
        for u in users.get(uid, []):
            pending[u.uid] -= 1
            if pending[u.uid] == 0:
                heapq.heappush(heap, (rank[u.uid], order[u.uid], u.uid))
    if len(out) != len(insts):
        raise AssertionError("roll_layers: the rewritten entry has a cycle")
    return out
