"""Which results of a while body write the loop state in place (no copy per trip), and the order that lets them.

A while's state lives in HBM scratch tensors (backend/control.py). A body result that is not the unchanged
state element used to be written into a separate buffer and copied back at the end of every trip (a DMA of
~1.3 us fixed cost per element and trip). Result k is instead written straight into state element k when that
cannot change what the body reads:
- every other instruction that reads state element k (directly, or through views: get-tuple-element,
  reshape, broadcast, slice... any layout op counts as a reader too, conservatively) is lowered before the
  instruction R producing result k; the scheduler orders the write after those reads (deps.py tracks WAR on
  HBM byte runs) and the barrier at the end of the trip orders it before the next trip;
- if R itself reads state element k, it does so only elementwise at the same index: R is an elementwise op,
  or a fusion of elementwise ops (and constants, broadcasts, iotas) in which the parameter fed by state
  element k is used by elementwise ops only, and R takes the state element itself as that operand (not a
  view of it): an elementwise kernel loads every element before it stores the result at the same place;
  or R is a dynamic-update-slice of state element k itself whose other operands do not read it (a layer
  loop's stacked outputs, backend/kernels/indirect_ops.py then skips copying the operand onto itself).
R must be a computing instruction written directly as the result (not a view of one), producing one result.

``in_place_order`` lowers the body in an order (defs before uses, like post order) that defers such producers
until their state element has no other reader left to emit, and says which results may go in place.
"""

from __future__ import annotations

from hlo.ir import Computation, Instruction
from hlo.opcodes import is_elementwise

FUSED_OK = frozenset({"parameter", "constant", "broadcast", "iota"})


def _state_reads(body: Computation, tuple_state: bool, n: int) -> list[set[int]]:
    """Per state element: the uids of the instructions reading it (views of it and their users)."""
    (param,) = body.parameters
    users = body.users()
    readers: list[set[int]] = [set() for _ in range(n)]
    for k in range(n):
        if tuple_state:
            frontier = [u for u in users.get(param, []) if u.opcode == "get-tuple-element"
                        and int(u.attrs["index"]) == k]
            others = [u for u in users.get(param, []) if u.opcode != "get-tuple-element"]
            readers[k].update(u.uid for u in others)  # the whole tuple read: every element
        else:
            frontier = [param]
        seen: set[int] = set()
        while frontier:
            inst = frontier.pop()
            if inst.uid in seen:
                continue
            seen.add(inst.uid)
            if inst is not param:
                readers[k].add(inst.uid)
            if inst is param or inst.opcode in _VIEWS:
                frontier.extend(users.get(inst, []))
    return readers


# ops whose value may be a view of their operand's buffer (backend/fused.py LAYOUT_OPS)
_VIEWS = frozenset({"get-tuple-element", "transpose", "reshape", "bitcast", "broadcast", "slice", "convert",
                    "copy", "tuple"})


def _state_operand(inst: Instruction, param: Instruction, tuple_state: bool, k: int) -> bool:
    if tuple_state:
        return inst.opcode == "get-tuple-element" and inst.operands[0] is param and int(inst.attrs["index"]) == k
    return inst is param


def _elementwise_in_place(r: Instruction, param: Instruction, tuple_state: bool, k: int, readers: set[int]) -> bool:
    """R reads state element k only elementwise at the same index (module doc), or R is a dynamic update of
    state element k itself that reads it nowhere else (its kernel writes the window into the same buffer)."""
    reads = [i for i, o in enumerate(r.operands) if _state_operand(o, param, tuple_state, k)]
    if r.opcode == "dynamic-update-slice":
        return reads == [0] and not any(o.uid in readers for o in r.operands[1:])
    if any(o.uid in readers and o.opcode in _VIEWS and i not in reads for i, o in enumerate(r.operands)):
        return False  # another view of the state element, read by R's kernel
    if r.opcode == "fusion":
        comp = r.attrs.get("calls")
        if not isinstance(comp, Computation) or comp.root is None:
            return False
        if any(not is_elementwise(i) and i.opcode not in FUSED_OK for i in comp.instructions):
            return False
        if tuple(comp.root.shape.dims) != tuple(r.shape.dims) or comp.root.opcode in FUSED_OK - {"iota"}:
            return False
        users = comp.users()
        params = {p.parameter_number: p for p in comp.parameters}
        return all(i in params and all(is_elementwise(u) for u in users.get(params[i], [])) for i in reads)
    return is_elementwise(r) and all(tuple(r.operands[i].shape.dims) == tuple(r.shape.dims) for i in reads)


def in_place_order(body: Computation, tuple_state: bool, results: list[Instruction], candidates: list[bool]
                   ) -> tuple[list[Instruction], list[bool]]:
    """(the body's instructions in lowering order, per result: written into its state element in place).
    `candidates[k]`: result k is a computing instruction the caller could direct into state element k."""
    (param,) = body.parameters
    n = len(results)
    readers = _state_reads(body, tuple_state, n)
    # a result that is a view of state element k is copied out after every producer: k cannot be in place
    late = [any(r.uid in readers[k] and r.opcode in _VIEWS and not (j == k and _state_operand(r, param, tuple_state, k))
                for j, r in enumerate(results)) for k in range(n)]
    producer: dict[int, int] = {}
    for k, (r, ok) in enumerate(zip(results, candidates, strict=True)):
        if ok and not late[k] and r.uid not in producer and (r.uid not in readers[k] or
                                             _elementwise_in_place(r, param, tuple_state, k, readers[k])):
            producer[r.uid] = k
    order_hint = {inst.uid: i for i, inst in enumerate(body.post_order())}
    insts = body.post_order()
    pending = {i.uid: sum(1 for _ in _unique(i.operands)) for i in insts}
    users = body.users()
    ready = [i for i in insts if pending[i.uid] == 0]
    emitted: set[int] = set()
    order: list[Instruction] = []
    in_place = [False] * n
    while ready:
        plain = [i for i in ready if i.uid not in producer]
        if plain:
            inst = min(plain, key=lambda i: order_hint[i.uid])
        else:  # only deferred producers: one whose state element has no other reader left, if any
            def done(i: Instruction) -> bool:
                return all(u in emitted or u == i.uid for u in readers[producer[i.uid]])
            free = [i for i in ready if done(i)]
            inst = min(free or ready, key=lambda i: order_hint[i.uid])
            in_place[producer[inst.uid]] = bool(free)
        ready.remove(inst)
        emitted.add(inst.uid)
        order.append(inst)
        for u in _unique(users.get(inst, [])):
            if u.uid not in pending:
                continue  # not reachable from ROOT
            pending[u.uid] -= 1
            if pending[u.uid] == 0:
                ready.append(u)
    return order, in_place


def _unique(insts: list[Instruction]) -> list[Instruction]:
    seen: set[int] = set()
    out = []
    for i in insts:
        if i.uid not in seen:
            seen.add(i.uid)
            out.append(i)
    return out
