"""Before fusing: give dots the shapes of their consumers, so no reshape sits between a dot and the
elementwise ops, reductions or second dot that could fuse with it.

A reshape of a dot's result that only splits, merges, adds or drops dims *within* the dot's output
groups (batch dims, lhs free dims, rhs free dims) is sunk into the dot: the operands are reshaped
instead (a reshape of a reshape collapses; one back to the original shape disappears), and the dot
produces the reshaped result directly. The frontend writes ``linear`` on a [B, T, d] input as
reshape -> dot -> reshape and attention as dots over merged batch*heads; after this step the whole
attention block and every matmul epilogue live in one shape. Transposes and reshapes cost nothing in
the backend (they are strided views), so the rewrite never adds data movement.
"""

from __future__ import annotations

from math import prod

from compiler.passes.utils import insert_before, new_instruction
from hlo.ir import Computation, Instruction, Module, Shape
from hlo.opcodes import is_elementwise

BATCH, LHS, RHS = 0, 1, 2  # output dim groups of a dot, in output order
# values whose converts are not merged after them (views and converts themselves; parameters and constants,
# which the backend converts as it reads them)
class _Users(dict):
    """``comp.users()``, kept while the computation is unchanged: ``fresh()`` computes it again when
    instructions were added or removed since, or when the caller marked it ``stale`` (a rewrite)."""

    def __init__(self, comp: Computation) -> None:
        super().__init__(comp.users())
        self.comp, self.count, self.stale = comp, len(comp.instructions), False

    def fresh(self) -> _Users:
        return self if not self.stale and len(self.comp.instructions) == self.count else _Users(self.comp)


_NOT_HOISTED = ("reshape", "bitcast", "transpose", "slice", "convert", "parameter", "constant", "tuple",
                "get-tuple-element", "broadcast")


def _pairs(old: tuple[int, ...], new: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """Aligned runs of old and new dims with equal products; a size-1 dim on one side only is its own
    run with nothing on the other side. None if the sizes do not match."""
    if prod(old) != prod(new) or 0 in old:
        return None
    i = j = 0
    pairs: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    while i < len(old) or j < len(new):
        if j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
            pairs.append(((), (j,)))
            j += 1
        elif i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
            pairs.append(((i,), ()))
            i += 1
        else:
            oi, nj = [i], [j]
            po, pn = old[i], new[j]
            i, j = i + 1, j + 1
            while po != pn:
                if po < pn:
                    oi.append(i)
                    po *= old[i]
                    i += 1
                else:
                    nj.append(j)
                    pn *= new[j]
                    j += 1
            pairs.append((tuple(oi), tuple(nj)))
    return pairs


def _new_groups(dot: Instruction, new_dims: tuple[int, ...]) -> list[list[int]] | None:
    """The sizes of the (batch, lhs free, rhs free) groups after reshaping the dot's output to
    `new_dims`, or None if the reshape mixes groups."""
    nb = len(dot.attrs.get("lhs_batch_dims", ()))
    lhs = dot.operands[0]
    nl = lhs.shape.rank - nb - len(dot.attrs.get("lhs_contracting_dims", ()))
    old_dims = tuple(dot.shape.dims)
    label = [BATCH] * nb + [LHS] * nl + [RHS] * (len(old_dims) - nb - nl)
    pairs = _pairs(old_dims, new_dims)
    if pairs is None:
        return None
    new_label: list[int | None] = [None] * len(new_dims)
    for oi, nj in pairs:
        groups = {label[i] for i in oi}
        if len(groups) > 1:
            return None
        group = next(iter(groups)) if groups else None
        for j in nj:
            new_label[j] = group
    for j in range(len(new_dims)):  # new size-1 dims join the group of a neighbour
        if new_label[j] is None:
            near = [new_label[k] for k in (j - 1, j + 1) if 0 <= k < len(new_dims) and new_label[k] is not None]
            new_label[j] = near[0] if near else LHS
    if any(a > b for a, b in zip(new_label, new_label[1:])):  # type: ignore[operator]
        return None
    if any(g not in label for g in new_label):  # a group the dot does not have (only size-1 dims)
        return None
    return [[d for d, g in zip(new_dims, new_label) if g == k] for k in (BATCH, LHS, RHS)]


class DotReshapeSinking:
    """Sinks group-respecting reshapes of dot results into the dots (see the module docstring)."""

    def __init__(self, module: Module, comp: Computation):
        self.module = module
        self.comp = comp
        self.notes: list[str] = []

    def run(self) -> bool:
        changed = False
        while self._hoist_converts() | self._collapse() | self._hoist() | self._sink_all() | self._sink_keepdims():
            changed = True
        if changed:
            self._remove_dead()
        return changed

    # -- converts of a value's uses merge right after it -------------------------------------------------------
    def _hoist_converts(self) -> bool:
        """When every use of a computed value, through views (reshape, transpose, slice), converts it to the
        same type (auto-cast before the dots that read it: per attention head, per matmul operand), convert
        once, right after it: the convert joins the producer's fusion (a dot's epilogue, the softmax
        before attention's second dot) and the views carry the narrow type."""
        changed = False
        users = _Users(self.comp)  # the users map, recomputed only after the computation changed
        for dot in [i for i in self.comp.instructions if i.opcode not in _NOT_HOISTED]:
            users = users.fresh()
            if dot.opcode == "dot" and any(u.opcode in ("reshape", "bitcast")
                                           and _new_groups(dot, tuple(u.shape.dims)) is not None for u in users[dot]):
                continue  # the reshape sinks into the dot first (_sink_all), the convert follows it then
            views, converts = self._view_tree(dot, users)
            dtypes = {c.shape.dtype for c in converts}
            if not views or not converts or len(dtypes) != 1 or dot.shape.dtype in dtypes:
                continue  # (no views: the convert is right after the dot already)
            dtype = dtypes.pop()
            cvt = new_instruction(self.module, "convert", Shape.array(dtype, dot.shape.dims), [dot],
                                  metadata=converts[0].metadata)
            insert_before(self.comp, views[0] if views else converts[0], cvt)
            for user in users[dot]:
                user.operands = [cvt if o is dot else o for o in user.operands]
            for view in views:
                view.shape = Shape.array(dtype, view.shape.dims)
            for c in converts:
                self.comp.replace_all_uses(c, c.operands[0])
                self.comp.remove(c)
            self.notes.append(f"NOTE    converts of %{dot.name}'s uses to {dtype} merged into one after it")
            changed = True
            users.stale = True
        return changed

    def _view_tree(self, root: Instruction, users: dict[Instruction, list[Instruction]]
                   ) -> tuple[list[Instruction], list[Instruction]]:
        """The views (reshape/transpose/slice, used only by views or converts) below `root` in program order,
        and the converts ending them; ([], []) if anything else uses them."""
        views: list[Instruction] = []
        converts: list[Instruction] = []
        frontier = [root]
        while frontier:
            for user in users[frontier.pop()]:
                if user.opcode in ("reshape", "bitcast", "transpose", "slice") and user is not self.comp.root:
                    views.append(user)
                    frontier.append(user)
                elif user.opcode == "convert":
                    converts.append(user)
                else:
                    return [], []
        order = {inst.uid: n for n, inst in enumerate(self.comp.instructions)}
        return sorted(views, key=lambda i: order[i.uid]), converts

    def _collapse(self) -> bool:
        """reshape(reshape(x)) -> reshape(x) or x; transpose(transpose(x)) -> one transpose or x."""
        changed = False
        for inst in list(self.comp.instructions):
            if inst not in self.comp.instructions or inst.opcode not in ("reshape", "bitcast", "transpose"):
                continue
            inner = inst.operands[0]
            if inst.opcode == "transpose" and inner.opcode == "transpose":
                outer_perm, inner_perm = tuple(inst.attrs["dimensions"]), tuple(inner.attrs["dimensions"])
                perm = tuple(inner_perm[p] for p in outer_perm)
                source = inner.operands[0]
                new = source if perm == tuple(range(len(perm))) else insert_before(self.comp, inst, new_instruction(
                    self.module, "transpose", inst.shape, [source], {"dimensions": perm}, metadata=inst.metadata))
            elif inst.opcode in ("reshape", "bitcast") and inner.opcode in ("reshape", "bitcast"):
                new = self._reshape(inner.operands[0], tuple(inst.shape.dims), inst)
            else:
                continue
            self.comp.replace_all_uses(inst, new)
            self.comp.remove(inst)
            changed = True
        if changed:
            self._remove_dead()
        return changed

    # -- reshapes of a dot's epilogue move up to the dot ------------------------------------------------
    def _hoist(self) -> bool:  # (never above a convert: _hoist_converts keeps converts right after values)
        """reshape(op(x, broadcast(b)...)) -> op(reshape(x), broadcast'(b)...) when x leads, through
        single-user elementwise ops, to a dot: the reshape then sits right after the dot."""
        changed = False
        users = _Users(self.comp)  # the users map, recomputed only after the computation changed
        for reshape in list(self.comp.instructions):
            if reshape.opcode not in ("reshape", "bitcast") or reshape not in self.comp.instructions:
                continue
            op = reshape.operands[0]
            users = users.fresh()
            if (not is_elementwise(op) or op.opcode == "convert" or users[op] != [reshape]
                    or not self._leads_to_dot(op, users)):
                continue
            pairs = _pairs(tuple(op.shape.dims), tuple(reshape.shape.dims))
            operands = [self._moved_operand(o, pairs, reshape) for o in op.operands] if pairs else [None]
            if any(o is None for o in operands):
                continue
            new = new_instruction(self.module, op.opcode, Shape.array(op.shape.dtype, reshape.shape.dims),
                                  operands, dict(op.attrs), metadata=op.metadata, name=op.name)
            insert_before(self.comp, reshape, new)
            self.comp.replace_all_uses(reshape, new)
            self.comp.remove(reshape)
            self.comp.remove(op)
            self.notes.append(f"NOTE    reshape %{reshape.name} moved above %{op.name} toward its dot")
            changed = True
            users.stale = True
        return changed

    def _leads_to_dot(self, op: Instruction, users: dict[Instruction, list[Instruction]]) -> bool:
        while True:
            computed = [o for o in op.operands if o.opcode not in ("broadcast", "constant")]
            if len(computed) != 1:
                return False
            op = computed[0]
            if op.opcode == "dot":
                return len(users[op]) == 1
            if not is_elementwise(op) or len(users[op]) != 1:
                return False

    def _moved_operand(self, operand: Instruction, pairs, anchor: Instruction) -> Instruction | None:
        """`operand` in the reshaped shape: a reshape of the computed operand, or the broadcast of the
        same source along the corresponding new dims (None when a broadcast dim is split or merged)."""
        if operand.opcode == "constant" and operand.shape.rank == 0:
            return operand
        if operand.opcode != "broadcast":
            return self._reshape(operand, tuple(anchor.shape.dims), anchor)
        new_of_old = {oi[0]: nj[0] for oi, nj in pairs if len(oi) == 1 and len(nj) == 1}
        return self._rebroadcast(operand, new_of_old, anchor.shape.dims, anchor)

    def _rebroadcast(self, operand: Instruction, new_of_old: dict[int, int], dims: tuple[int, ...],
                     anchor: Instruction) -> Instruction | None:
        """``operand`` (a broadcast) to shape ``dims``, its source dims moved by ``new_of_old``, inserted before
        ``anchor`` (None when a source dim has no place in the new shape)."""
        old = tuple(operand.attrs.get("dimensions", ()))
        if any(d not in new_of_old for d in old):
            return None
        b = new_instruction(self.module, "broadcast", Shape.array(operand.shape.dtype, dims),
                            [operand.operands[0]], {"dimensions": tuple(new_of_old[d] for d in old)},
                            metadata=operand.metadata)
        return insert_before(self.comp, anchor, b)

    # -- a row statistic's keepdim reshape sinks to its broadcast back ---------------------------------
    def _sink_keepdims(self) -> bool:
        """op(reshape(x), broadcast(b)...) -> reshape(op(x, broadcast'(b)...)), and broadcast(reshape(x)) ->
        broadcast'(x), for a reshape that only inserts size-1 dims after a row reduction (keepdim=True, as HF's
        RMSNorm writes x.pow(2).mean(-1, keepdim=True)): the statistic then meets its broadcast back inside
        one row fusion instead of the reshape splitting the norm into three kernels."""
        changed = False
        users = _Users(self.comp)  # the users map, recomputed only after the computation changed
        for reshape in list(self.comp.instructions):
            if reshape not in self.comp.instructions or reshape.opcode not in ("reshape", "bitcast"):
                continue
            src = reshape.operands[0]
            keep = _inserted_ones(tuple(src.shape.dims), tuple(reshape.shape.dims))
            if keep is None or not _from_reduce(src):
                continue
            users = users.fresh()
            if len(users[reshape]) != 1:
                continue
            (user,) = users[reshape]
            if user.opcode == "broadcast":
                dims = tuple(user.attrs.get("dimensions", ()))
                new = new_instruction(self.module, "broadcast", user.shape, [src],
                                      {"dimensions": tuple(dims[k] for k in keep)}, metadata=user.metadata)
            elif is_elementwise(user) and user.opcode not in ("custom-call",) and user is not self.comp.root:
                operands = [self._unshaped(o, reshape, src, keep, user) for o in user.operands]
                if any(o is None for o in operands):
                    continue
                op = new_instruction(self.module, user.opcode, Shape.array(user.shape.dtype, src.shape.dims),
                                     operands, dict(user.attrs), metadata=user.metadata, name=user.name)
                insert_before(self.comp, user, op)
                new = new_instruction(self.module, "reshape", user.shape, [op], metadata=reshape.metadata)
            else:
                continue
            insert_before(self.comp, user, new)
            self.comp.replace_all_uses(user, new)
            self.comp.remove(user)
            self.notes.append(f"NOTE    keepdim reshape %{reshape.name} moved below %{user.name}")
            changed = True
            users.stale = True
        if changed:
            self._remove_dead()
        return changed

    def _unshaped(self, operand: Instruction, reshape: Instruction, src: Instruction, keep: list[int],
                  anchor: Instruction) -> Instruction | None:
        """An operand of the reshape's user in the source's shape (None: not expressible)."""
        if operand is reshape:
            return src
        if operand.opcode == "constant" and operand.shape.rank == 0:
            return operand
        if operand.opcode != "broadcast":
            return None
        return self._rebroadcast(operand, {j: i for i, j in enumerate(keep)}, src.shape.dims, anchor)

    # -- reshapes of a dot's result sink into the dot ---------------------------------------------------
    def _sink_all(self) -> bool:
        changed = False
        for reshape in list(self.comp.instructions):
            if reshape.opcode not in ("reshape", "bitcast") or reshape not in self.comp.instructions:
                continue
            dot = reshape.operands[0]
            if dot.opcode != "dot" or len(self.comp.users()[dot]) != 1 or dot is self.comp.root:
                continue
            groups = _new_groups(dot, tuple(reshape.shape.dims))
            if groups is None:
                note = (f"NOTE    reshape %{reshape.name} of %{dot.name} mixes the dot's batch/free dims: kept "
                        "after the dot")
                if note not in self.notes:
                    self.notes.append(note)
                continue
            self._sink(dot, reshape, groups)
            changed = True
        return changed

    def _sink(self, dot: Instruction, reshape: Instruction, groups: list[list[int]]) -> None:
        attrs = dict(dot.attrs)
        new_ops = []
        for side, free_sizes in (("lhs", groups[LHS]), ("rhs", groups[RHS])):
            operand = dot.operands[0 if side == "lhs" else 1]
            batch = tuple(attrs.get(f"{side}_batch_dims", ()))
            contract = tuple(attrs.get(f"{side}_contracting_dims", ()))
            new_op, new_batch, new_contract = self._regroup(operand, batch, contract, groups[BATCH], free_sizes,
                                                            reshape)
            new_ops.append(new_op)
            attrs[f"{side}_batch_dims"] = new_batch
            attrs[f"{side}_contracting_dims"] = new_contract
        for side in ("lhs", "rhs"):
            if not attrs[f"{side}_batch_dims"]:
                attrs.pop(f"{side}_batch_dims")
        new_dot = new_instruction(self.module, "dot", Shape.array(dot.shape.dtype, reshape.shape.dims), new_ops,
                                  attrs, metadata=dot.metadata, name=dot.name)
        insert_before(self.comp, reshape, new_dot)
        self.comp.replace_all_uses(reshape, new_dot)
        self.comp.remove(reshape)
        self.comp.remove(dot)
        self.notes.append(f"NOTE    reshape %{reshape.name} sunk into %{dot.name}: %{new_dot.name} produces "
                          f"{list(reshape.shape.dims)} directly")

    def _regroup(self, operand: Instruction, batch: tuple[int, ...], contract: tuple[int, ...],
                 batch_sizes: list[int], free_sizes: list[int], anchor: Instruction
                 ) -> tuple[Instruction, tuple[int, ...], tuple[int, ...]]:
        """`operand` with its batch and free dims re-grouped to the given sizes; the new batch and
        contracting dims. Groups are replaced in place when each is contiguous, else the operand is
        transposed to (batch, free, contracting) first."""
        rank = operand.shape.rank
        free = tuple(d for d in range(rank) if d not in batch and d not in contract)
        label = {**{d: BATCH for d in batch}, **{d: LHS for d in free}, **{d: RHS for d in contract}}
        blocks = [tuple(g) for g in (batch, free, contract)]
        contiguous = all(list(b) == list(range(b[0], b[0] + len(b))) for b in blocks if b)
        if not contiguous:
            operand = self._transpose(operand, batch + free + contract, anchor)
            batch = tuple(range(len(batch)))
            free = tuple(range(len(batch), len(batch) + len(free)))
            contract = tuple(range(len(batch) + len(free), rank))
            label = {**{d: BATCH for d in batch}, **{d: LHS for d in free}, **{d: RHS for d in contract}}
        sizes = {BATCH: batch_sizes, LHS: free_sizes, RHS: [operand.shape.dims[d] for d in contract]}
        new_dims: list[int] = []
        new_batch: list[int] = []
        new_contract: list[int] = []
        emitted: set[int] = set()
        for d in range(rank):  # each group's block is replaced in place by its new sizes
            g = label[d]
            if g in emitted:
                continue
            emitted.add(g)
            for size in sizes[g]:
                (new_batch if g == BATCH else new_contract if g == RHS else []).append(len(new_dims))
                new_dims.append(size)
        return self._reshape(operand, tuple(new_dims), anchor), tuple(new_batch), tuple(new_contract)

    def _transpose(self, operand: Instruction, perm: tuple[int, ...], anchor: Instruction) -> Instruction:
        if perm == tuple(range(len(perm))):
            return operand
        dims = [operand.shape.dims[p] for p in perm]
        t = new_instruction(self.module, "transpose", Shape.array(operand.shape.dtype, dims), [operand],
                            {"dimensions": perm}, metadata=operand.metadata)
        return insert_before(self.comp, anchor, t)

    def _reshape(self, operand: Instruction, dims: tuple[int, ...], anchor: Instruction) -> Instruction:
        while operand.opcode in ("reshape", "bitcast"):  # a reshape of a reshape is one reshape
            operand = operand.operands[0]
        if tuple(operand.shape.dims) == dims:
            return operand
        r = new_instruction(self.module, "reshape", Shape.array(operand.shape.dtype, dims), [operand],
                            metadata=operand.metadata)
        return insert_before(self.comp, anchor, r)

    def _remove_dead(self) -> None:
        """Reshapes, transposes and broadcasts left without users (the operands' old views)."""
        changed = True
        while changed:
            changed = False
            users = self.comp.users()
            for inst in list(self.comp.instructions):
                if (inst.opcode in ("reshape", "bitcast", "transpose", "broadcast") and not users[inst]
                        and inst is not self.comp.root):
                    self.comp.remove(inst)
                    changed = True


def _inserted_ones(old: tuple[int, ...], new: tuple[int, ...]) -> list[int] | None:
    """For a reshape that only inserts size-1 dims: the new index of each old dim (else None)."""
    if len(new) <= len(old):
        return None
    keep, i = [], 0
    for j, size in enumerate(new):
        if i < len(old) and size == old[i]:
            keep.append(j)
            i += 1
        elif size != 1:
            return None
    return keep if i == len(old) else None


def _from_reduce(value: Instruction) -> bool:
    """Is `value` a row reduction, or computed from one alone through elementwise ops?"""
    while True:
        if value.opcode == "reduce":
            return True
        computed = [o for o in value.operands if o.opcode not in ("broadcast", "constant")]
        if not is_elementwise(value) or len(computed) != 1:
            return False
        value = computed[0]
