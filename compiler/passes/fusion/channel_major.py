"""Channel-last regions of a CNN run channel-major: no transposes around ConvNeXt's LayerNorm and MLP.

ConvNeXt (and any model that permutes a feature map to apply per-pixel Linear layers and a LayerNorm over
channels) writes

    y = x.permute(0, 2, 3, 1)          # [N, C, H, W] -> [N, H, W, C]
    y = LayerNorm(y); y = Linear(y); y = gelu(y); y = Linear(y); y = gamma * y
    out = residual + y.permute(0, 3, 1, 2)

The backend stores feature maps channel-major (channels on partitions, pixels along the free dim), so each
permute is a materialized transpose, and the residual add reads the transposed copy: on ConvNeXt-tiny the
permutes and adds took ~40% of the run. In channel-major layout the same region needs no transpose at all:

* a Linear over channels (``dot`` contracting the last dim with a constant weight [O, C]) is a 1x1
  convolution with weight [O, C, 1, 1]: the conv kernel's stationary is the weight, its moving operand the
  feature map, and its epilogue takes the bias, activation, layer scale and residual add on the way out of PSUM;
* a reduction over channels (LayerNorm's mean and variance) is a 1x1 convolution with a ones weight
  [1, C, 1, 1]: the sum over partitions is what PE's contraction does (fp32 operands, or bf16 ones under
  --auto-cast: PE time is 4x less, and the error is below that of the auto-cast that follows); with few
  channels, a ones weight [C, C, 1, 1] computes the sum already broadcast to every channel, and x minus its
  channel mean is one 1x1 convolution by C * I - ones (exact small integers, also in bf16) scaled by 1 / C;
* elementwise ops, converts, broadcasts of scalars, of per-channel vectors and of per-pixel values, and
  reshapes that only merge or split the pixel dims carry over with their dims renamed.

A region starts at ``transpose(x, {0,2,3,1})`` of a rank-4 value and grows through its users by those rules;
it is rewritten only when every way out of it is the inverse ``transpose(., {0,3,1,2})`` back to [N, C', H, W]
(which then disappears). Anything else reading a region value leaves the whole region as it is. Each region
value is either *full* (channel last, the pixels flattened in (n, h, w) order in the dims before it; rewritten
as [N, C', H, W]) or *per-pixel* (the channel reduced away; rewritten as [N, 1, H, W]).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from compiler.passes.interface import HloPass
from compiler.passes.simplify.dce import DeadCodeElimination
from compiler.passes.utils import constant_value, dot_dims, insert_before, insert_constant, new_instruction
from hlo.ir import Computation, Instruction, Module, Quoted, Shape, Window, numpy_dtype
from hlo.opcodes import is_elementwise

TO_CHANNEL_LAST = (0, 2, 3, 1)
TO_CHANNEL_MAJOR = (0, 3, 1, 2)
# channel sums computed broadcast to every channel up to this count (two 128-partition tiles: 4 matmuls per
# pixel block instead of 2, less than GpSimd's two broadcasts of the per-pixel rows; measured on ConvNeXt)
BROADCAST_CHANNELS = 256


@dataclass(frozen=True)
class Kind:
    """How a region value maps to channel-major: `channels` > 0 for a full value, 0 for a per-pixel one."""

    channels: int


def _is_add_reduce(inst: Instruction) -> bool:
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, Computation) or comp.root is None or comp.root.opcode != "add":
        return False
    params = comp.parameters
    return (len(comp.instructions) == 3 and len(params) == 2
            and {id(o) for o in comp.root.operands} == {id(p) for p in params})


class ChannelMajor(HloPass):
    name = "channel_major"

    def __init__(self, sum_dtype: str | None = None):
        """`sum_dtype`: under --auto-cast, the PE operand type of an f32 channel sum (its error, ~2^-9 / sqrt(C)
        of the values, is below the rounding of the normalized values to the matmul type that follows);
        None: fp32 matmuls, exact products but 4x the PE time."""
        self.sum_dtype = sum_dtype

    def run(self, module: Module) -> bool:
        comp = module.entry
        if comp is None:
            return False
        self._ones: dict[tuple[int, int, str], Instruction] = {}  # (outputs, C, dtype); outputs -C: centring
        self._converted: dict[int, Instruction] = {}  # full value uid -> its convert to sum_dtype
        self._bcast = 0
        changed = False
        for start in list(comp.instructions):
            if start in comp.instructions and self._is_entry(start):
                changed |= self._rewrite(module, comp, start)
        if changed:  # the channel-last chains are dead now
            DeadCodeElimination().run(module)
        return changed

    @staticmethod
    def _is_entry(inst: Instruction) -> bool:
        return (inst.opcode == "transpose" and inst.shape.rank == 4
                and tuple(inst.attrs.get("dimensions", ())) == TO_CHANNEL_LAST)

    # ---- growing the region ----

    def _grow(self, comp: Computation, start: Instruction) -> tuple[dict[int, Kind], list[Instruction]] | None:
        """The region's values (uid -> kind) and its exits, or None when some user breaks the rules. One sweep
        in program order: every operand of an instruction is classified before it."""
        n, h, w, _ = start.shape.dims
        self._pixels = n * h * w
        kinds: dict[int, Kind] = {start.uid: Kind(start.shape.dims[3])}
        exits: list[Instruction] = []
        for inst in comp.instructions[comp.instructions.index(start) + 1:]:
            inside = [o for o in inst.operands if o.uid in kinds]
            if not inside:
                continue
            kind = self._user_kind(inst, inside[0], kinds)
            if kind is None:
                return None
            if kind == "exit":
                exits.append(inst)
            else:
                kinds[inst.uid] = kind
        if not exits or (comp.root is not None and comp.root.uid in kinds):
            return None
        return kinds, exits

    def _full(self, shape: Shape) -> bool:
        return shape.rank >= 2 and prod(shape.dims[:-1]) == self._pixels

    def _user_kind(self, user: Instruction, value: Instruction, kinds: dict[int, Kind]) -> Kind | str | None:
        kind = kinds[value.uid]
        op = user.opcode
        if op == "transpose" and kind.channels and value.shape.rank == 4 \
                and tuple(user.attrs.get("dimensions", ())) == TO_CHANNEL_MAJOR:
            return "exit"
        if op == "reshape":
            if kind.channels and self._full(user.shape) and user.shape.dims[-1] == kind.channels:
                return kind
            if not kind.channels and user.shape.size == self._pixels:
                return kind
            return None
        if op == "reduce" and kind.channels and len(user.operands) == 2 and user.operands[0] is value:
            dims = tuple(user.attrs.get("dimensions", ()))
            if dims == (value.shape.rank - 1,) and _is_add_reduce(user) and constant_value(user.operands[1]) == 0:
                return Kind(0)
            return None
        if op == "broadcast" and not kind.channels:
            dims = tuple(user.attrs.get("dimensions", ()))
            if self._full(user.shape) and dims == tuple(range(user.shape.rank - 1)) \
                    and value.shape.dims == user.shape.dims[:-1]:
                return Kind(user.shape.dims[-1])
            return None
        if op == "dot" and kind.channels and user.operands[0] is value and value.shape.rank == 2:
            lc, rc, lb, rb = dot_dims(user)
            weight = user.operands[1]
            if (lc == (1,) and rc in ((0,), (1,)) and not lb and not rb and weight.opcode == "constant"
                    and weight.literal is not None and weight.shape.rank == 2):
                return Kind(user.shape.dims[-1])
            return None
        if is_elementwise(user) and user.shape.dims == value.shape.dims:
            for operand in user.operands:
                if operand.uid in kinds:
                    if kinds[operand.uid] != kind or operand.shape.dims != user.shape.dims:
                        return None
                elif self._lift_dims(operand, kind) is None:
                    return None
            return kind
        return None

    def _lift_dims(self, operand: Instruction, kind: Kind) -> tuple[int, ...] | None:
        """How an operand from outside the region is rebuilt in channel-major: a broadcast of a scalar
        (dims ()) or, for a full value, of a per-channel vector (dims (1,)); None if it cannot be."""
        if operand.opcode != "broadcast":
            return None
        src = operand.operands[0]
        dims = tuple(operand.attrs.get("dimensions", ()))
        if src.shape.rank == 0:
            return ()
        if kind.channels and src.shape.rank == 1 and dims == (operand.shape.rank - 1,):
            return (1,)
        return None

    # ---- rewriting ----

    def _rewrite(self, module: Module, comp: Computation, start: Instruction) -> bool:
        grown = self._grow(comp, start)
        if grown is None:
            return False
        kinds, exits = grown
        n, h, w, _ = start.shape.dims
        self._nhw = (n, h, w)
        members = [i for i in comp.instructions if i.uid in kinds]
        self._bcast = self._broadcast_channels(members, kinds)
        mapped: dict[int, Instruction] = {start.uid: start.operands[0]}
        for inst in members:
            if inst is not start:
                mapped[inst.uid] = self._rewrite_one(module, comp, inst, kinds, mapped)
        for exit_ in exits:
            value = mapped[exit_.operands[0].uid]
            assert value.shape.dims == exit_.shape.dims and value.shape.dtype == exit_.shape.dtype, exit_.where()
            comp.replace_all_uses(exit_, value)
        return True

    @staticmethod
    def _broadcast_channels(members: list[Instruction], kinds: dict[int, Kind]) -> int:
        """C when every channel sum of the region sums C channels and every per-pixel value is read back
        broadcast to C channels (LayerNorm): then the sums are computed broadcast, by a ones weight [C, C]
        (PE time does not depend on the output channels, and the engines' time per partition row does not
        either), and the per-pixel values are [N, C, H, W] tensors read in place, instead of [N, 1, H, W]
        rows broadcast to the partitions on chip by GpSimd for every reader. Only up to BROADCAST_CHANNELS:
        a sum over T channel tiles takes T x T matmuls broadcast (T plain) and a [C, C] weight. 0 otherwise."""
        counts = {kinds[i.operands[0].uid].channels for i in members if i.opcode == "reduce"}
        counts |= {kinds[i.uid].channels for i in members if i.opcode == "broadcast"}
        return counts.pop() if len(counts) == 1 and max(counts) <= BROADCAST_CHANNELS else 0

    def _cm_shape(self, kind: Kind, dtype: str) -> Shape:
        n, h, w = self._nhw
        return Shape(dtype, (n, kind.channels or self._bcast or 1, h, w))

    def _rewrite_one(self, module: Module, comp: Computation, inst: Instruction, kinds: dict[int, Kind],
                     mapped: dict[int, Instruction]) -> Instruction:
        kind = kinds[inst.uid]
        shape = self._cm_shape(kind, inst.shape.dtype)
        meta = inst.metadata

        def add(opcode: str, shp: Shape, operands: list[Instruction], attrs: dict | None = None,
                name: str | None = None) -> Instruction:
            return insert_before(comp, inst, new_instruction(module, opcode, shp, operands, attrs, meta,
                                                             name=name or f"{inst.name}.cm"))

        op = inst.opcode
        if op == "reshape":
            return mapped[inst.operands[0].uid]
        if op == "subtract" and kind.channels and self._is_centering(inst, kinds):
            # x - mean over channels = ((C * I - ones) @ x) / C: one matmul pass, exact small-integer weights
            x = self._sum_operand(inst.operands[0], mapped, add)
            c = kind.channels
            weight = self._ones.get((-c, c, x.shape.dtype))
            if weight is None:
                literal = (c * np.eye(c) - np.ones((c, c))).reshape(c, c, 1, 1).astype(numpy_dtype(x.shape.dtype))
                weight = insert_constant(comp, new_instruction(
                    module, "constant", Shape(x.shape.dtype, (c, c, 1, 1)), [],
                    {"data": Quoted(module.unique_name(f"channel_major.centre{c}.{x.shape.dtype}"))}, meta,
                    literal=literal, name=f"{inst.name}.centre"))
                self._ones[-c, c, x.shape.dtype] = weight
            summed = self._conv(module, comp, inst, x, weight, shape)
            scale = insert_constant(comp, new_instruction(module, "constant", Shape(shape.dtype, ()), [], None, meta,
                                                          literal=np.asarray(1.0 / c, numpy_dtype(shape.dtype)),
                                                          name=f"{inst.name}.inv_c"))
            spread = add("broadcast", shape, [scale], {"dimensions": ()})
            return add("multiply", shape, [summed, spread])
        if op == "reduce":
            x = self._sum_operand(inst.operands[0], mapped, add)
            channels = x.shape.dims[1]
            dtype = x.shape.dtype
            outs = shape.dims[1]
            ones = self._ones.get((outs, channels, dtype))
            if ones is None:
                ones = new_instruction(module, "constant", Shape(dtype, (outs, channels, 1, 1)), [],
                                       {"data": Quoted(module.unique_name(f"channel_major.ones{channels}.{dtype}"))},
                                       meta, literal=np.ones((outs, channels, 1, 1), numpy_dtype(dtype)),
                                       name=f"{inst.name}.ones")
                self._ones[outs, channels, dtype] = insert_constant(comp, ones)
            return self._conv(module, comp, inst, x, ones, shape)
        if op == "broadcast":
            src = mapped[inst.operands[0].uid]  # [N, 1, H, W], or [N, C, H, W] already broadcast
            if self._bcast:
                return src
            flat = add("reshape", Shape(src.shape.dtype, self._nhw), [src], name=f"{inst.name}.cm_pixels")
            return add("broadcast", shape, [flat], {"dimensions": (0, 2, 3)})
        if op == "dot":
            x = mapped[inst.operands[0].uid]
            weight = inst.operands[1]
            _, rc, _, _ = dot_dims(inst)
            literal = weight.literal if rc == (1,) else weight.literal.T
            o, c = literal.shape
            wshape = Shape(weight.shape.dtype, (o, c, 1, 1))
            attrs = dict(weight.attrs)
            if "data" in attrs:
                attrs["data"] = Quoted(module.unique_name(f"{attrs['data'].text}.conv1x1"))
            conv_w = new_instruction(module, "constant", wshape, [], attrs, weight.metadata,
                                     literal=np.ascontiguousarray(literal).reshape(o, c, 1, 1),
                                     name=f"{weight.name}.conv1x1")
            insert_constant(comp, conv_w)
            return self._conv(module, comp, inst, x, conv_w, shape)
        # elementwise
        operands = []
        for operand in inst.operands:
            if operand.uid in mapped:
                operands.append(mapped[operand.uid])
                continue
            dims = self._lift_dims(operand, kind)
            assert dims is not None  # _grow checked every operand
            src = operand.operands[0]
            operands.append(add("broadcast", Shape(src.shape.dtype, shape.dims), [src], {"dimensions": dims},
                                name=f"{operand.name}.cm"))
        return add(op, shape, operands, dict(inst.attrs))

    def _sum_operand(self, value: Instruction, mapped: dict[int, Instruction], add) -> Instruction:
        """The channel-major `value` as a channel-summing matmul reads it (in sum_dtype, one convert shared)."""
        x = mapped[value.uid]
        if x.shape.dtype != "f32" or self.sum_dtype is None:
            return x
        if x.uid not in self._converted:
            self._converted[x.uid] = add("convert", x.shape.with_dtype(self.sum_dtype), [x],
                                         name=f"{value.name}.cm_operand")
        return self._converted[x.uid]

    @staticmethod
    def _is_centering(inst: Instruction, kinds: dict[int, Kind]) -> bool:
        """subtract(x, broadcast(reduce_add_over_channels(x) * (1 / C))) (or / C): x minus its channel mean."""
        x, b = inst.operands
        if b.opcode != "broadcast" or b.uid not in kinds or x.uid not in kinds or not kinds[x.uid].channels:
            return False
        c = kinds[x.uid].channels
        if c > BROADCAST_CHANNELS:  # T x T matmuls for T channel tiles and a [C, C] weight: not worth it
            return False
        mean = b.operands[0]
        if mean.opcode not in ("multiply", "divide") or len(mean.operands) != 2:
            return False
        total, factor = mean.operands
        value = constant_value(factor)
        want = 1.0 / c if mean.opcode == "multiply" else float(c)
        return (total.opcode == "reduce" and total.operands[0] is x and value is not None
                and abs(value - want) <= 1e-6 * abs(want))

    @staticmethod
    def _conv(module: Module, comp: Computation, inst: Instruction, x: Instruction, weight: Instruction,
              shape: Shape) -> Instruction:
        """A 1x1 convolution of [N, C, H, W] by weight [O, C, 1, 1]."""
        attrs = {"window": Window.make((1, 1)), "dim_labels": "bf01_oi01->bf01", "feature_group_count": 1}
        return insert_before(comp, inst, new_instruction(module, "convolution", shape, [x, weight], attrs,
                                                         inst.metadata, name=f"{inst.name}.cm"))
