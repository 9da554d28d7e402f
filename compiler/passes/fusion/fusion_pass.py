"""Producer/consumer fusion into ``fusion`` instructions with fused computations (XLA's InstructionFusion).

Phases, all on the entry computation (``strategy="greedy"``):

0. **Preparation** (fusion_prepare.py): reshapes of dot results are sunk into the dots, so that dots and
   their consumers share one shape.
1. **Attention** (``kind=kCustom``, fusion_attention.py): QK^T, its elementwise scale/mask, softmax and the
   product with V as one fusion, which the backend runs as one flash-attention kernel; then a CNN's classifier
   head (global average pooling, a LayerNorm over channels, the classifier: fusion/head.py) as one ``fused_head``.
2. **Matmul epilogue** (``kind=kOutput``): a ``dot`` or ``convolution`` plus the chain of elementwise consumers
   after it, as long as every intermediate has a single user and each consumer is an epilogue op the engines
   apply on the way out of PSUM: add of a broadcast (bias) or of a same-shape tensor (residual), subtract of a
   broadcast or constant, multiply/divide by a broadcast or constant (an inference batch norm is a subtract and
   a multiply), maximum with zero (relu), tanh, logistic, exponential, rsqrt, sqrt, gelu/gelu_tanh custom-calls,
   convert.
3. **Loop and row fusion** (``kind=kLoop``, or ``kInput`` with reductions): visiting consumers from ROOT upward,
   a consumer absorbs producers (elementwise ops, reductions, broadcasts of computed values) all of whose users
   are already in its fusion, as long as one kernel can compute the group (fusion_rows.py: one index space, one
   set of reduced axes, whole rows within the SBUF budget). Softmax, layer norm and RMS norm become one kernel.

In all phases, broadcasts of operands move *into* the fused computation (the fusion reads the small operand,
e.g. the bias vector, not its broadcast), together with scalar constants they broadcast; a broadcast or
constant that has users outside the fusion is duplicated rather than moved. Fused computations are added
before the entry as ``fused_computation``, ``fused_computation.1``...; their parameters are ``param_N``.

``strategy="cost"`` (fusion_cost.py) runs the same phases but also duplicates an elementwise producer into a
consumer's fusion when recomputing it moves fewer HBM bytes than materializing and re-reading it.

Every decision, taken or refused, is recorded as a :class:`FusionDecision` (``fusion_decisions.txt``).
"""

from __future__ import annotations

from dataclasses import replace

from compiler.passes.fusion.attention import attention_groups
from compiler.passes.fusion.group import FusionDecision, FusionGroup
from compiler.passes.fusion.head import head_groups
from compiler.passes.fusion.prepare import DotReshapeSinking
from compiler.passes.fusion.registry import FUSION_STRATEGIES
from compiler.passes.fusion.rope import RopeRewrite
from compiler.passes.fusion.rows import fusible, space_reason
from compiler.passes.interface import HloPass
from compiler.passes.utils import constant_value, insert_before
from hlo.ir import Computation, Instruction, Module
from hlo.opcodes import ELEMENTWISE_CUSTOM_CALLS, custom_call_target, is_elementwise

_UNARY_EPILOGUES = ("tanh", "logistic", "exponential", "convert", "rsqrt", "sqrt")
_NEVER_CANDIDATES = ("parameter", "constant")
EPILOGUE_DAG_LIMIT = 48  # members of an elementwise epilogue DAG considered
# ops whose result the engines can transform on the way out of PSUM (perfcnn: convolutions too, so that a
# batch norm and relu after a convolution are its epilogue rather than a kernel re-reading its output)
EPILOGUE_ANCHORS = ("dot", "convolution")


class FusionPass(HloPass):
    name = "fusion"

    def __init__(self, strategy: str = "greedy", epilogue: bool = True, loop: bool = True, prepare: bool = True,
                 attention: bool = True, recompute_weight: float = 1.0):
        # the strategy (compiler/passes/fusion/registry.py, a plug-in's too) says which phases run and may
        # refuse a fusion the pass allows (spec.allow) or recompute a shared producer (spec.duplicate)
        self.strategy = strategy
        self.spec = FUSION_STRATEGIES.get(strategy)
        self.recompute_weight = recompute_weight
        self.epilogue = epilogue and self.spec.epilogue
        self.loop = loop and self.spec.loop
        self.prepare = prepare and self.spec.prepare
        self.attention = attention and self.spec.attention
        self.decisions: list[FusionDecision] = []
        self.notes: list[str] = []

    def decision_lines(self) -> list[str]:
        return self.notes + [str(d) for d in self.decisions]

    def run(self, module: Module) -> bool:
        self.decisions = []
        self.notes = []
        if module.entry is None:
            return False
        changed = False
        for comp in [module.entry] + loop_bodies(module):
            changed |= self._run_on(module, comp)
        return changed

    def _run_on(self, module: Module, comp: Computation) -> bool:
        changed = False
        if self.prepare:
            sinking = DotReshapeSinking(module, comp)
            changed |= sinking.run()
            self.notes += sinking.notes
            rope = RopeRewrite(module, comp)  # rotate_half + multiply-adds over [..., 2, h]: one loop kernel
            changed |= rope.run()
            self.notes += rope.notes
        if self.attention:
            groups = attention_groups(comp, self._record)
            for group in groups:
                self._absorb_broadcasts(group, comp.users(), set())
            changed |= self._fuse_groups(module, comp, groups)
            heads = head_groups(comp, self._record)  # a CNN's pooling, normalization and classifier
            for group in heads:
                self._absorb_broadcasts(group, comp.users(), set())
            changed |= self._fuse_groups(module, comp, heads)
        if self.epilogue:
            changed |= self._fuse_groups(module, comp, self._epilogue_groups(comp))
        if self.loop:
            changed |= self._fuse_groups(module, comp, self._loop_groups(comp))
        return changed

    def _record(self, producer: Instruction, consumer: Instruction, fused: bool, reason: str,
                kind: str) -> None:
        self.decisions.append(FusionDecision(producer.name, consumer.name, fused, reason, kind))

    # -- phase 1: matmul epilogues ----------------------------------------------------------------------------
    def _epilogue_groups(self, comp: Computation) -> list[FusionGroup]:
        users = comp.users()
        claimed: set[int] = set()
        groups = []
        for dot in [i for i in comp.instructions if i.opcode in EPILOGUE_ANCHORS]:
            chain = [dot]
            tail = dot
            while users[tail] and tail is not comp.root:
                tail_users = users[tail]
                if len(tail_users) > 1:
                    for u in tail_users:
                        self._record(tail, u, False, f"producer %{tail.name} has {len(tail_users)} users "
                                     "(an epilogue intermediate must have one)", "kOutput")
                    break
                consumer = tail_users[0]
                if consumer.uid in claimed:
                    self._record(tail, consumer, False, f"consumer %{consumer.name} is already in another "
                                 "epilogue", "kOutput")
                    break
                verdict = self._epilogue_verdict(tail, consumer)
                if verdict[0] and self.spec.allow is not None:
                    veto = self.spec.allow(tail, consumer, "kOutput", chain)
                    verdict = verdict if veto is None else (False, f"strategy {self.strategy}: {veto}")
                self._record(tail, consumer, verdict[0], verdict[1], "kOutput")
                if not verdict[0]:
                    break
                chain.append(consumer)
                tail = consumer
            if len(users[tail]) > 1 and tail is not comp.root:
                # the chain stopped at a value used several times (tanh-GELU written out: x feeds x*0.5,
                # x**3 and x + ...): the elementwise DAG behind it may still end in one value
                refusals = len(self.decisions) - len(users[tail])
                grown = self._epilogue_dag(comp, chain, users, claimed)
                if len(grown) > len(chain):
                    dag = self.decisions[len(self.decisions) - (len(grown) - len(chain)):]
                    self.decisions[refusals:] = dag  # the "has N users" refusals no longer hold
                chain, tail = grown, grown[-1]
            if len(chain) == 1:
                continue
            claimed.update(i.uid for i in chain)
            group = FusionGroup(tail, "kOutput", {i.uid: i for i in chain}, set())
            self._absorb_broadcasts(group, users, claimed)
            groups.append(group)
        return groups

    def _epilogue_dag(self, comp: Computation, chain: list[Instruction], users: dict[Instruction, list[Instruction]],
                      claimed: set[int]) -> list[Instruction]:
        """Extend an epilogue chain into an elementwise DAG with a single result: the members reachable
        from the chain through elementwise consumers whose other operands an epilogue can read; of the
        candidate results (a member and its ancestors), the largest group in which every other member
        is used only inside the group. Returns the members in program order, the result last."""
        position = {inst.uid: n for n, inst in enumerate(comp.instructions)}
        members = {i.uid: i for i in chain}
        frontier = list(chain)
        while frontier and len(members) < EPILOGUE_DAG_LIMIT:
            producer = frontier.pop()
            for consumer in users[producer]:
                if consumer.uid in members or consumer.uid in claimed:
                    continue
                verdict = self._dag_verdict(consumer, members)
                if verdict is None:
                    members[consumer.uid] = consumer
                    frontier.append(consumer)
        ordered = sorted(members.values(), key=lambda i: position[i.uid])
        best: list[Instruction] = chain
        for result in ordered[len(chain):]:
            group = self._ancestors(result, members)
            inside = {i.uid for i in group}
            if all(u.uid in inside for m in group if m is not result for u in users[m]) and len(group) > len(best):
                best = sorted(group, key=lambda i: position[i.uid])
        inside = {i.uid for i in best}
        for m in best[len(chain):]:
            producer = next(o for o in m.operands if o.uid in inside)
            self._record(producer, m, True, "elementwise epilogue DAG (its values are used only inside it)",
                         "kOutput")
        return best

    @staticmethod
    def _ancestors(result: Instruction, members: dict[int, Instruction]) -> list[Instruction]:
        seen: dict[int, Instruction] = {}
        stack = [result]
        while stack:
            inst = stack.pop()
            if inst.uid in seen or inst.uid not in members:
                continue
            seen[inst.uid] = inst
            stack += inst.operands
        return list(seen.values())

    @staticmethod
    def _dag_verdict(consumer: Instruction, members: dict[int, Instruction]) -> str | None:
        """Why `consumer` (fed by a member) cannot join an epilogue DAG, or None."""
        if not is_elementwise(consumer):
            return "not elementwise"
        if consumer.opcode == "custom-call" and custom_call_target(consumer) not in ELEMENTWISE_CUSTOM_CALLS:
            return "not an elementwise custom-call"
        outside = [o for o in dict.fromkeys(consumer.operands) if o.uid not in members]
        for other in outside:
            if other.opcode in ("broadcast", "constant"):
                continue
            if consumer.opcode == "add" and len(outside) == 1:
                continue  # a residual add
            return f"reads the full tensor %{other.name}"
        return None

    @staticmethod
    def _epilogue_verdict(producer: Instruction, consumer: Instruction) -> tuple[bool, str]:
        op = consumer.opcode
        others = [o for o in consumer.operands if o is not producer]
        other = others[0] if others else producer
        if not is_elementwise(consumer):
            return False, f"consumer %{consumer.name} ({op}) is not elementwise"
        if op in _UNARY_EPILOGUES:
            return True, f"{op} epilogue"
        if op == "custom-call" and custom_call_target(consumer) in ELEMENTWISE_CUSTOM_CALLS:
            return True, f"{custom_call_target(consumer)} epilogue"
        if op == "add":
            if other.opcode == "broadcast":
                return True, f"bias add of broadcast %{other.name}"
            return True, f"residual add of %{other.name}"
        if op == "subtract" and other.opcode in ("broadcast", "constant"):
            return True, f"subtract of {other.opcode} %{other.name}"
        if op in ("multiply", "divide"):
            if op == "divide" and consumer.operands[0] is not producer:
                return False, f"%{producer.name} is the divisor of %{consumer.name}, not the dividend"
            if other.opcode in ("broadcast", "constant"):
                return True, f"{op} by {other.opcode} %{other.name}"
            if op == "multiply" and other.shape.dims == consumer.shape.dims and other.opcode != "parameter":
                # a gated product (SwiGLU's silu(gate) * up): read like a residual, written once
                return True, f"product with the computed tensor %{other.name} (gated epilogue)"
            return False, f"{op} by the full tensor %{other.name} is not a scale epilogue"
        if op == "maximum":
            if constant_value(other) == 0.0:
                return True, "relu (maximum with zero)"
            return False, f"maximum with %{other.name}, which is not zero, is not a relu"
        if consumer.opcode == "custom-call":
            return False, f"custom-call {custom_call_target(consumer)!r} is not an epilogue activation"
        return False, f"consumer %{consumer.name} ({op}) is not an epilogue op"

    # -- phase 3: loop and row fusions ----------------------------------------------------------------------
    def _loop_groups(self, comp: Computation) -> list[FusionGroup]:
        users = comp.users()
        position = {inst.uid: n for n, inst in enumerate(comp.instructions)}
        claimed: set[int] = set()
        groups: list[FusionGroup] = []
        dead: set[int] = set()  # duplicated everywhere it is used: never materialized
        for root in reversed(comp.instructions):
            if root.uid in claimed or not fusible(root) or root.opcode in ("broadcast", "constant", "iota"):
                continue
            copies = {u.uid for g in groups if root.uid in g.shared for u in users[root] if u.uid in g.members}
            if copies and all(u.uid in copies or u.uid in dead for u in users[root]) and root is not comp.root:
                dead.add(root.uid)
                continue
            group = FusionGroup(root, "kLoop", {root.uid: root}, set())
            claimed.add(root.uid)
            first = len(self.decisions)
            self._grow(group, users, position, claimed)
            if any(m.opcode == "reduce" for m in group.members.values()):
                group.kind = "kInput"
            self._absorb_broadcasts(group, users, claimed)
            # decisions name the kind the fusion ended up with
            self.decisions[first:] = [replace(d, kind=group.kind) for d in self.decisions[first:]]
            if len(group.members) > 1:
                groups.append(group)
        return groups

    def _grow(self, group: FusionGroup, users: dict[Instruction, list[Instruction]], position: dict[int, int],
              claimed: set[int]) -> None:
        """Absorb producers into `group` until nothing more fits; a producer whose users are not all in
        the group yet waits until they are. When growth stalls, the cost strategy may recompute a
        waiting producer inside the group (fusion_cost.duplication)."""
        waiting: dict[int, tuple[Instruction, Instruction]] = {}
        worklist = [group.root]
        while True:
            while worklist:
                consumer = worklist.pop()
                for producer in dict.fromkeys(consumer.operands):
                    if producer.uid in group.members or producer.opcode in _NEVER_CANDIDATES:
                        continue
                    if producer.opcode == "broadcast" and not self._computed(producer.operands[0], claimed):
                        continue  # a broadcast of an operand: absorbed below, as a view
                    verdict = self._loop_verdict(producer, users, claimed)
                    if verdict is not None:
                        self._record(producer, consumer, False, verdict, group.kind)
                        continue
                    if any(u.uid not in group.members for u in users[producer]):
                        waiting[producer.uid] = (producer, consumer)
                        continue
                    worklist += self._try_add(group, producer, consumer, users, position, claimed, waiting)
            if self.spec.duplicate is None or not waiting:
                break
            producer, consumer = waiting.pop(next(iter(waiting)))
            duplicate, reason = self.spec.duplicate(producer, group.members, self.recompute_weight)
            if duplicate:
                worklist += self._try_add(group, producer, consumer, users, position, claimed, waiting, reason)
            else:
                self._record(producer, consumer, False, reason, group.kind)
        for producer, consumer in waiting.values():
            outside = [u for u in users[producer] if u.uid not in group.members]
            names = ", ".join(f"%{u.name}" for u in outside)
            self._record(producer, consumer, False, f"producer %{producer.name} also feeds {names} outside the "
                         "fusion (not duplicated)", group.kind)

    def _try_add(self, group: FusionGroup, producer: Instruction, consumer: Instruction,
                 users: dict[Instruction, list[Instruction]], position: dict[int, int], claimed: set[int],
                 waiting: dict[int, tuple[Instruction, Instruction]], duplicated: str = "") -> list[Instruction]:
        """Add `producer` if one kernel can still compute the group; returns the new members (producers
        that were waiting for it come along). A duplicated producer (`duplicated`: why), or one feeding a
        duplicated member (which stays in place), is copied into the fusion and left for its other users."""
        members = sorted([*group.members.values(), producer], key=lambda m: position[m.uid])
        reason = space_reason(members)
        kind = "kInput" if any(m.opcode == "reduce" for m in members) else "kLoop"
        if reason is None and self.spec.allow is not None:
            veto = self.spec.allow(producer, consumer, kind, members)
            reason = None if veto is None else f"strategy {self.strategy}: {veto}"
        if reason is not None:
            self._record(producer, consumer, False, reason, kind)
            return []
        group.members[producer.uid] = producer
        if duplicated or any(u.uid in group.shared for u in users[producer]):
            group.shared.add(producer.uid)
            why = duplicated or "feeds a duplicated member (copied along)"
        else:
            claimed.add(producer.uid)
            why = _fused_reason(producer)
        self._record(producer, consumer, True, why, kind)
        added = [producer]
        ready = [w for w in waiting.values() if all(u.uid in group.members for u in users[w[0]])]
        for p, c in ready:
            if waiting.pop(p.uid, None) is None:  # a recursive call below already took it
                continue
            added += self._try_add(group, p, c, users, position, claimed, waiting)
        return added

    @staticmethod
    def _computed(inst: Instruction, claimed: set[int]) -> bool:
        """Is `inst` a value the group could compute itself (rather than read as an operand)?"""
        return fusible(inst) and inst.uid not in claimed and inst.opcode not in ("constant", "broadcast")

    @staticmethod
    def _loop_verdict(producer: Instruction, users: dict[Instruction, list[Instruction]],
                      claimed: set[int]) -> str | None:
        """Why `producer` can never join, or None."""
        if producer.opcode == "fusion":
            return f"producer %{producer.name} is a {producer.attrs.get('kind', '')} fusion"
        if not fusible(producer):
            return f"producer %{producer.name} ({producer.opcode}) is not elementwise or a row reduction"
        if producer.uid in claimed:
            return f"producer %{producer.name} is already in another fusion"
        return None

    # -- shared: pull in broadcasts and scalar constants ------------------------------------------------------
    def _absorb_broadcasts(self, group: FusionGroup, users: dict[Instruction, list[Instruction]],
                           claimed: set[int]) -> None:
        for member in list(group.members.values()):
            if member.opcode == "dot":
                continue  # the dot reads its operands as they are
            for producer in dict.fromkeys(member.operands):
                if producer.opcode == "constant" and producer.shape.rank == 0 and producer.uid not in group.members:
                    self._add_cheap(group, producer, users)  # e.g. a reduction's init value
                    continue
                if producer.opcode != "broadcast" or producer.uid in group.members or producer.uid in claimed:
                    continue
                self._add_cheap(group, producer, users)
                source = producer.operands[0]
                scalar_constant = source.opcode == "constant" and source.shape.rank == 0
                reason = (f"broadcast of the scalar constant %{source.name} moved into the fusion" if scalar_constant
                          else f"broadcast moved into the fusion, which reads %{source.name} instead")
                if producer.uid in group.shared:
                    reason += " (duplicated: it has other users)"
                self._record(producer, member, True, reason, group.kind)
                if scalar_constant:
                    self._add_cheap(group, source, users)

    @staticmethod
    def _add_cheap(group: FusionGroup, inst: Instruction, users: dict[Instruction, list[Instruction]]) -> None:
        group.members[inst.uid] = inst
        # shared: something outside the fusion (or a shared copy that stays outside) still reads it
        if any(u.uid not in group.members or u.uid in group.shared for u in users[inst]):
            group.shared.add(inst.uid)

    # -- building fusion instructions --------------------------------------------------------------------------
    def _fuse_groups(self, module: Module, comp: Computation, groups: list[FusionGroup]) -> bool:
        shared: dict[int, Instruction] = {}
        position = {inst.uid: n for n, inst in enumerate(comp.instructions)}
        for group in sorted(groups, key=lambda g: position[g.root.uid]):  # number fusions in program order
            self._build(module, comp, group)
            shared.update((uid, group.members[uid]) for uid in group.shared)
        dead = True
        while shared and dead:  # duplicated members whose users all got fused are now dead
            users = comp.users()
            dead = [inst for inst in shared.values() if inst in users and not users[inst] and inst is not comp.root]
            for inst in dead:
                comp.remove(inst)
                del shared[inst.uid]
        return bool(groups)

    @staticmethod
    def _build(module: Module, comp: Computation, group: FusionGroup) -> Instruction:
        members = [i for i in comp.instructions if i.uid in group.members]  # defs before uses
        params: dict[int, Instruction] = {}
        operands: list[Instruction] = []
        clones: dict[int, Instruction] = {}
        body: list[Instruction] = []
        for m in members:
            new_operands = []
            for op in m.operands:
                if op.uid in group.members:
                    new_operands.append(clones[op.uid])
                    continue
                if op.uid not in params:
                    number = len(operands)
                    params[op.uid] = Instruction(module.unique_name(f"param_{number}"), "parameter", op.shape,
                                                 parameter_number=number)
                    operands.append(op)
                new_operands.append(params[op.uid])
            name = module.unique_name(m.name) if m.uid in group.shared else m.name
            clones[m.uid] = Instruction(name, m.opcode, m.shape, new_operands, dict(m.attrs), literal=m.literal,
                                        metadata=dict(m.metadata))
            body.append(clones[m.uid])
        body.sort(key=lambda i: i.opcode != "constant")  # stable: constants first, as canonicalize orders them
        prefix = group.name or ("fused_attention" if group.kind == "kCustom" else "fused_computation")
        fused = Computation(module.unique_name(prefix), list(params.values()) + body,
                            clones[group.root.uid])
        module.add_computation(fused)
        fusion = Instruction(module.unique_name("fusion"), "fusion", group.root.shape, operands,
                             {"kind": group.kind, "calls": fused}, metadata=dict(group.root.metadata))
        insert_before(comp, group.root, fusion)
        comp.replace_all_uses(group.root, fusion)
        for m in members:
            if m.uid not in group.shared:
                comp.remove(m)
        return fusion


def _fused_reason(producer: Instruction) -> str:
    if producer.opcode == "reduce":
        return "reduction along the fusion's row axes"
    if producer.opcode == "broadcast":
        return "broadcast of a row statistic back over the reduced axes"
    return "elementwise producer whose users are all in the fusion"


def loop_bodies(module: Module) -> list[Computation]:
    """The bodies of the while loops reachable from the entry (nested ones too): lowered once and run per
    trip (backend/control.py), they are fused like the entry."""
    found: list[Computation] = []
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        for inst in comp.instructions if comp is not None else ():
            body = inst.attrs.get("body") if inst.opcode == "while" else None
            if isinstance(body, Computation) and all(body is not f for f in found):
                found.append(body)
                stack.append(body)
    return found
