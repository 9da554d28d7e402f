"""HLO ``while`` and ``conditional`` on the ISA's control flow: the body's kernels are lowered once and run per trip.

Lowering records the structure of the program as it emits (``ControlRecorder``): straight-line *regions* of
emitted instructions, and the constructs between them:
- ``Loop``: a counted while (``hlo.while_loop.trip_count`` proves the trip count N): the body's regions run N
  times, every engine stream counting its own trips with ``loop``;
- ``While``: any other while: the condition's regions run, the predicate is read into a register by every stream
  (``reg_load`` from an SBUF tile the condition's last DMA filled), a ``branch`` leaves when it is false, the
  body's regions run and every stream ``jump``s back;
- ``Switch``: a conditional: the selector (pred, or s32 branch index; an index outside 0..N-1 takes the last
  branch, as XLA says) is read into a register by every stream and each stream branches to the same branch.
The loop-carried state lives in HBM scratch tensors at fixed addresses: the initial values are copied in before
the loop; the body reads them and writes each result straight into its state element when nothing it reads
later sees the change (backend/loop_state.py), else into a separate buffer copied back at the end of each trip
(a result that is the unchanged state element is neither written nor copied). How the regions are
scheduled and synchronised (a barrier after every region, semaphores reset per trip) is backend/control_schedule.py.

A body or branch is lowered by ``ComputationLowering``, the entry's Lowering over another computation: the same
kernels, its parameters bound to the state views, its ROOT elements written into the given buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from backend.emit import ProgramBuilder
from backend.fused import Value, view_of
from backend.kernels.elementwise import copy_kernel
from backend.layout import View, isa_dtype_of
from backend.loop_state import in_place_order
from backend.lower import KERNELS, Lowering, is_compute
from hlo.errors import CompilationError
from hlo.ir import Computation, Instruction, Shape
from hlo.shape_control import branches
from hlo.while_loop import trip_count
from isa.program import AccessPattern
from isa.program import Instruction as IsaInstruction

MAX_DEPTH = 8  # nesting depth of loops and conditionals (a register each for the counter and the predicate)


@dataclass
class Region:
    """Instructions builder.ops[start:end], scheduled together."""

    start: int
    end: int


@dataclass
class Loop:
    trips: int
    body: list = field(default_factory=list)
    name: str = ""


@dataclass
class While:
    cond: list
    pred: AccessPattern  # the condition's pred in SBUF, read by every stream
    body: list
    name: str = ""


@dataclass
class Switch:
    selector: AccessPattern  # pred or s32 in SBUF
    is_pred: bool
    branches: list[list]
    name: str = ""


Item = Region | Loop | While | Switch


class ControlRecorder:
    """The structure of the emitted instructions: a tree of regions and constructs (module doc)."""

    def __init__(self, ops: list[IsaInstruction]):
        self.ops = ops
        self.root: list[Item] = []
        self.stack: list[list[Item]] = [self.root]
        self.mark = 0

    @property
    def structured(self) -> bool:
        """Whether any construct was recorded (else the program is one straight-line region)."""
        return any(not isinstance(item, Region) for item in self.root)

    @property
    def depth(self) -> int:
        return len(self.stack) - 1

    def flush(self) -> None:
        if len(self.ops) > self.mark:
            self.stack[-1].append(Region(self.mark, len(self.ops)))
            self.mark = len(self.ops)

    def begin(self) -> list[Item]:
        self.flush()
        items: list[Item] = []
        self.stack.append(items)
        return items

    def end(self) -> None:
        self.flush()
        self.stack.pop()

    def add(self, item: Item) -> None:
        self.stack[-1].append(item)

    def finish(self) -> list[Item]:
        self.flush()
        return self.root


def recorder(builder: ProgramBuilder) -> ControlRecorder:
    """The builder's recorder (made on first use: a builder without control flow never has one)."""
    rec = getattr(builder, "control", None)
    if rec is None:
        rec = ControlRecorder(builder.ops)
        builder.control = rec  # type: ignore[attr-defined]
    return rec


class ComputationLowering(Lowering):
    """The entry's Lowering over another computation (a while body or condition, a conditional branch)."""

    def __init__(self, parent: Lowering, comp: Computation):  # not super().__init__: that binds the entry
        self.module = parent.module
        self.entry = comp
        self.b = parent.b
        self.users = comp.users()
        self.values: dict[int, Value] = {}
        self.dest: dict[int, View] = {}
        self._kernels = parent._kernels
        self.parent = parent

    def lower_into(self, args: list[Value], outs: list[View | None], order: list[Instruction] | None = None) -> None:
        """Lower the computation with parameter i bound to args[i]; ROOT element k is written into outs[k]
        (None: not wanted); the instructions in `order` (default: post order)."""
        comp = self.entry
        root = comp.root
        assert root is not None
        for p in comp.parameters:
            self.values[p.uid] = args[p.parameter_number or 0]
        roots = list(root.operands) if root.opcode == "tuple" else [root]
        for r, out in zip(roots, outs, strict=True):
            if out is not None and r.opcode != "parameter":
                self._assign_destination(r, out)
        for inst in order if order is not None else comp.post_order():
            if inst.uid not in self.values:
                self.values[inst.uid] = self.lower(inst)
        for k, (r, out) in enumerate(zip(roots, outs, strict=True)):
            if out is None:
                continue
            value = view_of(self.values[r.uid], r)
            self.b.origin = r.name
            if value.is_const:
                value = self.b.place(value)
            if not (value.buffer is out.buffer and value.is_dense_row_major()):
                copy_kernel(self.b, value, out, f"{comp.name}.result{k}", r.where())
        self.parent._kernels = self._kernels


def _parts(shape: Shape) -> tuple[Shape, ...]:
    return shape.tuple_shapes if shape.is_tuple else (shape,)


def _elements(value: Value, shape: Shape, inst: Instruction) -> list[View]:
    values = value if shape.is_tuple else [value]
    if not isinstance(values, list) or any(not isinstance(v, View) for v in values):
        raise CompilationError(f"{inst.where()}: nested tuples in a while state or conditional are not supported")
    return values


def _scratch_like(lw: Lowering, inst: Instruction, shapes: tuple[Shape, ...], what: str) -> list[View]:
    return [lw.b.scratch(isa_dtype_of(inst, s.dtype), tuple(s.dims), label=f"{inst.name} {what} {k}")
            for k, s in enumerate(shapes)]


def _to_register_tile(lw: Lowering, view: View, inst: Instruction, what: str) -> AccessPattern:
    """A persistent [1, 1] SBUF tile filled (by DMA, in the current region) with the scalar `view`."""
    if view.size != 1:
        raise CompilationError(f"{inst.where()}: the {what} must be a scalar")
    if view.is_const:
        view = lw.b.place(view)
    dtype = view.stored_dtype
    tile = lw.b.alloc.persistent(f"{inst.name}.{what}", 4)
    dst = tile.flat(dtype, 1, 1)
    src = view.hbm_ap(None, 0, 1, [], fixed={a: 0 for a in range(view.rank)})
    lw.b.origin = inst.name
    lw.b.dma(dst, src, f"{inst.name}: {what} to SBUF for the registers")
    return dst


def _forgetting_helpers(builder: ProgramBuilder):
    """The persistent helpers (identity, ones) created from now on are built inside a body that may not run:
    forget them afterwards so that later kernels build their own."""
    before = (set(builder._identity), set(builder._ones))

    def forget() -> None:
        for cache, known in ((builder._identity, before[0]), (builder._ones, before[1])):
            for key in [k for k in cache if k not in known]:
                del cache[key]

    return forget


def _keep_alive_through_loop(builder: ProgramBuilder, first_kernel: int) -> None:
    """Survey pass: a scratch tensor accessed inside a loop is read again in the next trip, so its SBUF image
    (residency.py) must live until the loop's end, not only until its last access in emission order."""
    survey = builder.survey
    if survey is None:
        return
    last = builder.alloc.kernel_index
    for accesses in survey.accesses.values():
        inside = [a for a in accesses if a.kernel >= first_kernel]
        if inside and max(a.kernel for a in inside) < last:
            accesses.append(replace(inside[-1], kernel=last, write=False))


def lower_while(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    cond, body = inst.attrs.get("condition"), inst.attrs.get("body")
    if not isinstance(cond, Computation) or not isinstance(body, Computation):
        raise CompilationError(f"{inst.where()}: while without condition and body computations")
    rec = recorder(lw.b)
    if rec.depth >= MAX_DEPTH:
        raise CompilationError(f"{inst.where()}: loops and conditionals nested deeper than {MAX_DEPTH}")
    shapes = _parts(inst.shape)
    init = _elements(ops[0], inst.shape, inst)
    state = _scratch_like(lw, inst, shapes, "state")
    lw.b.origin = inst.name
    for k, (src, dst) in enumerate(zip(init, state, strict=True)):
        copy_kernel(lw.b, lw.b.place(src) if src.is_const else src, dst, f"{inst.name}.init{k}", inst.where())
    args = [list(state) if inst.shape.is_tuple else state[0]]
    broot = body.root
    assert broot is not None
    results = list(broot.operands) if broot.opcode == "tuple" else [broot]
    unchanged = [r.opcode == "get-tuple-element" and r.operands[0].opcode == "parameter"
                 and int(r.attrs["index"]) == k for k, r in enumerate(results)] if inst.shape.is_tuple else [
        broot.opcode == "parameter"]
    order, in_place = in_place_order(body, inst.shape.is_tuple, results,
                                     [is_compute(r) and not same for r, same in zip(results, unchanged, strict=True)])
    nxt = [None if same or here else lw.b.scratch(isa_dtype_of(inst, s.dtype), tuple(s.dims),
                                                  label=f"{inst.name} next {k}")
           for k, (s, same, here) in enumerate(zip(shapes, unchanged, in_place, strict=True))]
    outs = [state[k] if here else nxt[k] for k, here in enumerate(in_place)]
    trips = trip_count(inst)

    def lower_body() -> None:
        forget = _forgetting_helpers(lw.b)
        ComputationLowering(lw, body).lower_into(args, outs, order)
        lw.b.origin = inst.name
        for k, (src, dst) in enumerate(zip(nxt, state, strict=True)):
            if src is not None:
                copy_kernel(lw.b, src, dst, f"{inst.name}.carry{k}", inst.where())
        if trips is None or trips == 0:
            forget()

    first_kernel = lw.b.alloc.kernel_index + 1
    if trips is not None:
        if trips > 0:
            items = rec.begin()
            lower_body()
            rec.end()
            rec.add(Loop(trips, items, inst.name))
    else:
        pred_view = lw.b.scratch("pred", (), label=f"{inst.name} condition")
        cond_items = rec.begin()
        ComputationLowering(lw, cond).lower_into(args, [pred_view])
        pred = _to_register_tile(lw, pred_view, inst, "condition")
        rec.end()
        body_items = rec.begin()
        lower_body()
        rec.end()
        rec.add(While(cond_items, pred, body_items, inst.name))
    _keep_alive_through_loop(lw.b, first_kernel)
    return list(state) if inst.shape.is_tuple else state[0]


def lower_conditional(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    comps = branches(inst.attrs)
    rec = recorder(lw.b)
    if rec.depth >= MAX_DEPTH:
        raise CompilationError(f"{inst.where()}: loops and conditionals nested deeper than {MAX_DEPTH}")
    selector = view_of(ops[0], inst.operands[0])
    is_pred = inst.operands[0].shape.dtype == "pred"
    shapes = _parts(inst.shape)
    if inst.shape.is_tuple:
        outs = _scratch_like(lw, inst, shapes, "result")
    else:
        outs = [lw.destination(inst)]
    tile = _to_register_tile(lw, selector, inst, "selector")
    arms = []
    for comp, arg in zip(comps, ops[1:], strict=True):
        items = rec.begin()
        forget = _forgetting_helpers(lw.b)
        ComputationLowering(lw, comp).lower_into([arg], list(outs))
        forget()
        rec.end()
        arms.append(items)
    rec.add(Switch(tile, is_pred, arms, inst.name))
    return list(outs) if inst.shape.is_tuple else outs[0]


KERNELS["while"] = lower_while
KERNELS["conditional"] = lower_conditional
