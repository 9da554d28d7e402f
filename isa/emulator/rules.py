"""Machine rules checked once per instruction when the program is decoded.

Every rule comes from machine-model.md ("Memory and access rules", "Tensor engine (PE)",
"Vector (DVE), Scalar (ACT), GpSimd (POOL)", "DMA"); the figures come from the target file.
Structural faults (unknown opcode, operand or tensor) raise ``ProgramError``; broken machine rules
raise ``RuleViolation``. Both name the instruction, the rule and the offending values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import NoReturn

from isa.dtypes import DTYPES, WIDE_INTEGERS
from isa.errors import ProgramError, RuleViolation
from isa.instructions import (
    ALL_AXES,
    NO_OP,
    OPCODES,
    OpcodeSpec,
    allowed_starts,
    indirect_side,
    reduce_axes,
    start_partition_allowed,
)
from isa.program import ENGINES, AccessPattern, Instruction, Program
from isa.target import Target

MAX_FREE_DIMS = 4
FP8_DTYPES = ("fp8e4", "fp8e5")
PE_DTYPES = ("f32", "bf16", "f16", *FP8_DTYPES)  # NKI nc_matmul: the Tensor engine takes floats only
BLOCK = 32  # transpose32's block edge

# machine-model.md "Engines and their instruction streams": GpSimd cannot access PSUM (PE's
# SBUF-read/PSUM-write rule is in the per-operand memories of isa.instructions.OPCODES).
ENGINE_MEMORIES: dict[str, tuple[str, ...]] = {
    "pe": ("sbuf", "psum"),
    "act": ("sbuf", "psum"),
    "dve": ("sbuf", "psum"),
    "pool": ("sbuf",),
    "sp": ("sbuf", "psum", "hbm"),
}


# ints: 8-byte integers live in SBUF/HBM; GpSimd computes on them in its integer mode (or converts them, or
# moves them by select), DMA moves their bytes. No fp32 engine (PE, ACT, DVE) touches them.
WIDE_INTEGER_OPS = frozenset({("pool", "tensor_tensor"), ("pool", "tensor_scalar"), ("pool", "tensor_copy"),
                              ("pool", "select"), ("pool", "memset"), ("pool", "iota"), ("sp", "dma"),
                              ("sp", "dma_indirect")})

ATTR_KINDS: dict[type, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,)}


def describe(index: int, inst: Instruction) -> str:
    """``instruction #12 pe.multiply_moving (line 7)``: how errors name an instruction."""
    line = f" (line {inst.line})" if inst.line is not None else ""
    return f"instruction #{index} {inst.engine}.{inst.opcode}{line}"


class _Who:
    """``describe(index, inst)``, formatted when a message uses it (``f"{who}: ..."``): a rule check names its
    instruction only when it fails, and decode checks tens of thousands."""

    __slots__ = ("index", "inst")

    def __init__(self, index: int, inst: Instruction):
        self.index, self.inst = index, inst

    def __str__(self) -> str:
        return describe(self.index, self.inst)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def free_size(ap: AccessPattern) -> int:
    """Elements per partition (``AccessPattern.free_size``: computed once per pattern object)."""
    return ap.free_size


def byte_bounds(ap: AccessPattern) -> tuple[int, int]:
    """[lo, hi) bytes an access touches: within one partition on chip, within the tensor in HBM."""
    size = DTYPES[ap.dtype].itemsize
    dims = list(ap.pattern)
    if ap.memory == "hbm":
        dims.append((ap.partition_stride, ap.partitions))
    lo = hi = ap.offset
    for stride, count in dims:
        reach = stride * (count - 1) * size
        lo += min(0, reach)
        hi += max(0, reach)
    return lo, hi + size


class Place:
    """One operand place (engine, opcode, operand, math mode): the patterns found valid there, by identity (the
    program keeps its patterns alive; compiled programs repeat them a lot), each with its signature (dtype,
    partitions, free size); and per geometry (the pattern but its offset) its bytes [below, above) relative to
    the offset, the bytes its memory holds and its signature."""

    __slots__ = ("name", "valid", "geometries")

    def __init__(self, name: str):
        self.name = name
        self.valid: dict[int, tuple[str, int, int]] = {}
        self.geometries: dict[tuple, tuple[int, int, int, tuple[str, int, int]]] = {}


class CheckedStructure:
    """What checking an instruction of an already valid structure needs (``RuleChecker.check_as``)."""

    __slots__ = ("spec", "rule", "places", "dma")

    def __init__(self, spec: OpcodeSpec, rule: Callable, places: tuple[Place | None, ...],
                 dma: tuple[Place, Place] | None):
        self.spec, self.rule, self.places = spec, rule, places
        self.dma = dma  # a dma whose queue is in range: its dst and src places


@dataclass
class DecodeState:
    """What the rules need to remember along the program (the PE stationary tile); a rule using it is named in
    ``STATE_RULES``."""

    stationary: AccessPattern | None = None


class RuleChecker:
    """Validates instructions against the opcode table and the target's limits."""

    def __init__(self, program: Program, target: Target):
        self.program = program
        self.target = target
        self.state = DecodeState()
        self.pe = target.data["pe"]
        self.stream = target.data["stream"]
        self.tensor_bytes: dict[str | None, int] = {}
        # structures (engine, opcode, operand names, attributes with their types) already found valid -> what
        # checking an instruction of that structure needs (``CheckedStructure``)
        self.valid_structures: dict[tuple, CheckedStructure] = {}
        self.places: dict[tuple[str, str, str, object], Place] = {}  # (engine, opcode, operand, math) -> its place
        self.n_sems = target.data["semaphores"]
        self.dma_queues = target.data["dma"]["queues"]

    def check(self, index: int, inst: Instruction) -> OpcodeSpec:
        """Check instruction ``index`` (RuleViolation, ProgramError); its opcode's table entry."""
        return self.check_as(index, inst, self.structure(index, inst))

    def structure(self, index: int, inst: Instruction) -> CheckedStructure:
        """What checking ``inst`` needs, found once per structure (engine, opcode, operand names, attributes with
        their types): a structure not seen before is checked here."""
        attrs, operands = inst.attrs, inst.operands
        # one flat tuple (the lengths keep it unambiguous): the names, the attribute values and their types
        key = (inst.engine, inst.opcode, len(operands), *operands, len(attrs), *attrs, *attrs.values(),
               *map(type, attrs.values()))
        checked = self.valid_structures.get(key)
        if checked is None:
            checked = self.valid_structures[key] = self._checked(_Who(index, inst), inst)
        return checked

    def check_as(self, index: int, inst: Instruction, checked: CheckedStructure,
                 operands_known: bool = False) -> OpcodeSpec:
        """Check ``inst``, of the structure ``checked`` (``structure``); ``operands_known``: an instruction with
        the same structure and the same operand pattern objects in the same places passed before, so its operands
        and its opcode rule pass as that one's did but for the part of the rule that depends on the instructions
        before it (``STATE_RULES``), checked with its semaphores."""
        operands = inst.operands
        n_sems = self.n_sems
        for sem, _ in inst.waits:
            if not 0 <= sem < n_sems:
                self._fail(_Who(index, inst), "semaphore id out of range", f"id {sem}, target has {n_sems}")
        for sem in inst.signals:
            if not 0 <= sem < n_sems:
                self._fail(_Who(index, inst), "semaphore id out of range", f"id {sem}, target has {n_sems}")
        if checked.dma is not None:  # most of a program: the dma rule is that both sides have one signature
            dst, src = operands["dst"], operands["src"]
            to, fro = checked.dma
            ours = to.valid.get(id(dst)) or self._valid(index, inst, checked.spec, to, dst)
            theirs = fro.valid.get(id(src)) or self._valid(index, inst, checked.spec, fro, src)
            if ours != theirs:
                RuleChecker._dma(self, _Who(index, inst), inst)  # its message
            return checked.spec
        # dma_indirect's indexed side is checked by its opcode rule (isa.emulator.indirect): no place for it
        if not operands_known:
            for ap, place in zip(operands.values(), checked.places):
                if place is not None and id(ap) not in place.valid:  # new here (a violation raises: decode ends)
                    self._valid(index, inst, checked.spec, place, ap)
            if checked.rule is not _no_rule:
                checked.rule(self, _Who(index, inst), inst)
        else:
            along = STATE_RULES.get(inst.opcode)
            if along is not None:
                along(self, _Who(index, inst), inst)
        return checked.spec

    def _valid(self, index: int, inst: Instruction, spec: OpcodeSpec, place: Place,
               ap: AccessPattern) -> tuple[str, int, int]:
        """Check an operand pattern not seen before in its place and remember it valid, with its signature.

        Every rule but the bounds is checked once per geometry (``_operand``): patterns that differ only in their
        offset pass or fail them alike (the tiles of one DMA loop share all but their offsets); the bounds are
        checked here for each offset."""
        key = (ap.pattern, ap.memory, ap.dtype, ap.partitions, ap.start_partition, ap.tensor, ap.partition_stride)
        placed = place.geometries.get(key)
        if placed is None:
            self._operand(_Who(index, inst), inst, spec, place.name, ap)
            lo, hi = byte_bounds(ap)
            placed = place.geometries[key] = (lo - ap.offset, hi - ap.offset, self._memory_bytes(ap),
                                              (ap.dtype, ap.partitions, free_size(ap)))
        below, above, limit, signature = placed
        offset = ap.offset
        if offset + below < 0 or offset + above > limit:  # the message, named only when it fails
            self._bounds(_Who(index, inst), f"operand {place.name}", ap, offset + below, offset + above)
        place.valid[id(ap)] = signature
        return signature

    def _checked(self, who: _Who, inst: Instruction) -> CheckedStructure:
        """Check a structure not seen before, and what its instructions need: the spec, the opcode rule, the
        patterns found valid for each operand (in the instruction's order; None: checked by the rule)."""
        spec = self._check_structure(who, inst)
        engine, opcode = inst.engine, inst.opcode
        if engine not in spec.engines:
            self._fail(who, f"{opcode} cannot run on engine {engine}", f"allowed engines: {', '.join(spec.engines)}")
        indirect = indirect_side(opcode, inst.attrs) if opcode == "dma_indirect" else None
        math = inst.attrs.get("math")  # a pattern valid in one math mode may not be in the other
        places = tuple(None if name == indirect else self._place(engine, opcode, name, math)
                       for name in inst.operands)
        dma = None
        if opcode == "dma" and 0 <= inst.attrs.get("queue", 0) < self.dma_queues:  # else _dma's message, in turn
            dma = (self._place(engine, opcode, "dst", math), self._place(engine, opcode, "src", math))
        return CheckedStructure(spec, OPCODE_RULES.get(opcode, _no_rule), places, dma)

    def _place(self, engine: str, opcode: str, name: str, math: object) -> Place:
        place = self.places.get((engine, opcode, name, math))
        if place is None:
            place = self.places[engine, opcode, name, math] = Place(name)
        return place

    @staticmethod
    def _fail(who: str, rule: str, values: str) -> NoReturn:
        raise RuleViolation(f"{who}: {rule}: {values}")

    def _check_structure(self, who: str, inst: Instruction) -> OpcodeSpec:
        if inst.engine not in ENGINES:
            raise ProgramError(f"{who}: unknown engine {inst.engine!r}; known: {', '.join(ENGINES)}")
        spec = OPCODES.get(inst.opcode)
        if spec is None:
            raise ProgramError(f"{who}: unknown opcode {inst.opcode!r}")
        names = {o.name for o in spec.operands}
        for name in inst.operands:
            if name not in names:
                raise ProgramError(f"{who}: unknown operand {name!r}; expected {', '.join(sorted(names))}")
        for o in spec.operands:
            if not o.optional and o.name not in inst.operands:
                raise ProgramError(f"{who}: missing operand {o.name!r}")
        attr_specs = {a.name: a for a in spec.attrs}
        for name, value in inst.attrs.items():
            a = attr_specs.get(name)
            if a is None:
                raise ProgramError(f"{who}: unknown attribute {name!r}")
            if not isinstance(value, ATTR_KINDS[a.kind]) or isinstance(value, bool):
                raise ProgramError(f"{who}: attribute {name}={value!r} is not {a.kind.__name__}")
            if a.choices and value not in a.choices:
                raise ProgramError(f"{who}: attribute {name}={value!r} not one of {', '.join(a.choices)}")
        for a in spec.attrs:
            if a.default is None and a.name not in inst.attrs:
                raise ProgramError(f"{who}: missing attribute {a.name!r}")
        return spec

    def _operand(self, who: str, inst: Instruction, spec: OpcodeSpec, name: str, ap: AccessPattern) -> None:
        what = f"operand {name}"
        if ap.dtype not in DTYPES:
            self._fail(who, f"{what}: unknown dtype", f"{ap.dtype!r}; known: {', '.join(DTYPES)}")
        if ap.dtype in WIDE_INTEGERS and (inst.engine, inst.opcode) not in WIDE_INTEGER_OPS:
            self._fail(who, f"{what}: {ap.dtype} is computed by GpSimd's integer mode and moved by DMA only",
                       f"not by {inst.engine}.{inst.opcode} (machine-model.md lists no 64-bit type for the fp32 "
                       "engines; docs/integer-semantics.md)")
        if ap.dtype in WIDE_INTEGERS and inst.opcode in ("tensor_tensor", "tensor_scalar") and \
                inst.attrs.get("math", "fp32") != "int":
            self._fail(who, f"{what}: {ap.dtype} arithmetic needs math=int", "fp32 math would round it")
        allowed = spec.operand(name).memories
        if ap.memory not in allowed:
            self._fail(who, f"{what}: {inst.opcode} cannot access {ap.memory}",
                       f"allowed: {', '.join(allowed)}")
        if ap.memory not in ENGINE_MEMORIES[inst.engine]:
            self._fail(who, f"{what}: engine {inst.engine} cannot access {ap.memory}",
                       f"allowed: {', '.join(ENGINE_MEMORIES[inst.engine])}")
        if len(ap.pattern) > MAX_FREE_DIMS:
            self._fail(who, f"{what}: too many free dimensions", f"{len(ap.pattern)} > {MAX_FREE_DIMS}")
        if any(count < 1 for _, count in ap.pattern) or ap.partitions < 1:
            self._fail(who, f"{what}: counts must be >= 1",
                       f"partitions {ap.partitions}, pattern {list(ap.pattern)}")
        lo, hi = byte_bounds(ap)
        if ap.memory == "hbm":
            decl = self.program.tensors.get(ap.tensor or "")
            if decl is None:
                raise ProgramError(f"{who}: {what}: unknown HBM tensor {ap.tensor!r}")
            self._bounds(who, what, ap, lo, hi)
            return
        self._partitions(who, what, ap, start_rule=inst.engine != "sp")
        self._bounds(who, what, ap, lo, hi)
        if inst.engine in ("act", "dve", "pool"):
            limit = self.stream["max_free_sbuf" if ap.memory == "sbuf" else "max_free_psum"]
            if free_size(ap) > limit:
                self._fail(who, f"{what}: free size over the {ap.memory} limit",
                           f"{free_size(ap)} elements > {limit}")

    def _memory_bytes(self, ap: AccessPattern) -> int:
        """The bytes ``ap`` may address: its HBM tensor's, or one SBUF/PSUM partition's."""
        if ap.memory == "hbm":
            size = self.tensor_bytes.get(ap.tensor)
            if size is None:
                size = self.tensor_bytes[ap.tensor] = self.program.tensors[ap.tensor].nbytes
            return size
        return self.target.sbuf_partition_bytes if ap.memory == "sbuf" else self.target.psum_partition_bytes

    def _bounds(self, who: str, what: str, ap: AccessPattern, lo: int, hi: int) -> None:
        """The bytes [lo, hi) of ``ap`` lie inside its HBM tensor or its SBUF/PSUM partition."""
        if ap.memory == "hbm":
            size = self.tensor_bytes.get(ap.tensor)
            if size is None:
                size = self.tensor_bytes[ap.tensor] = self.program.tensors[ap.tensor].nbytes
            if lo < 0 or hi > size:
                self._fail(who, f"{what}: access outside HBM tensor {ap.tensor}",
                           f"bytes [{lo}, {hi}) of a {size}-byte tensor")
            return
        size = self.target.sbuf_partition_bytes if ap.memory == "sbuf" else self.target.psum_partition_bytes
        if lo < 0 or hi > size:
            self._fail(who, f"{what}: access outside the {ap.memory} partition", f"bytes [{lo}, {hi}) of {size}")

    def _partitions(self, who: str, what: str, ap: AccessPattern, start_rule: bool) -> None:
        """Partition range; the start-partition rule binds the compute engines' SBUF/PSUM ports,
        not DMA, whose descriptors address any partition (NKI ISA reference)."""
        parts = self.target.partitions
        count, start = ap.partitions, ap.start_partition
        if count > parts:
            self._fail(who, f"{what}: partition count over {parts}", f"{count}")
        if start < 0 or start + count > parts:
            self._fail(who, f"{what}: partitions out of range", f"[{start}, {start + count}) of {parts}")
        if not start_rule:
            return
        if not start_partition_allowed(start, count):
            self._fail(who, f"{what}: start partition rule",
                       f"{count} partitions may start at {allowed_starts(count)}, not {start}")

    # opcode-specific rules -------------------------------------------------------------------

    def _same_shape(self, who: str, inst: Instruction, names: tuple[str, ...]) -> None:
        aps = [(n, inst.operands[n]) for n in names if n in inst.operands]
        first_name, first = aps[0]
        for name, ap in aps[1:]:
            if ap.partitions != first.partitions or free_size(ap) != free_size(first):
                self._fail(who, f"operands {first_name} and {name} differ in shape",
                           f"{first.partitions}x{free_size(first)} vs {ap.partitions}x{free_size(ap)}")

    def _per_partition_vector(self, who: str, inst: Instruction, name: str) -> None:
        ap = inst.operands.get(name)
        dst = inst.operands["dst"]
        if ap is not None and (free_size(ap) != 1 or ap.partitions != dst.partitions):
            self._fail(who, f"operand {name} must be a per-partition [P, 1] vector",
                       f"{ap.partitions}x{free_size(ap)} for {dst.partitions} partitions")

    def _pe_dtype(self, who: str, inst: Instruction) -> None:
        src = inst.operands["src"]
        if src.dtype not in PE_DTYPES:
            self._fail(who, "operand src: PE operands must be floating point",
                       f"{src.dtype}; allowed: {', '.join(PE_DTYPES)}")

    def _psum_bank(self, who: str, what: str, dst: AccessPattern) -> None:
        bank = self.target.psum_bank_bytes
        lo, hi = byte_bounds(dst)
        if lo // bank != (hi - 1) // bank:
            self._fail(who, f"{what} dst crosses a PSUM bank", f"bytes [{lo}, {hi}), banks of {bank}")

    def _load_stationary(self, who: str, inst: Instruction) -> None:
        self._pe_dtype(who, inst)
        src = inst.operands["src"]
        self._k_limit(who, src, "stationary")
        if free_size(src) > self.pe["max_m"]:
            self._fail(who, "stationary M over the limit", f"M={free_size(src)} > {self.pe['max_m']}")
        self._keep_stationary(who, inst)

    def _k_limit(self, who: str, src: AccessPattern, tile: str, detail: str = "") -> None:
        """A PE operand's contraction size K (its partitions) against the limit of its dtype."""
        max_k = self.pe["max_k_fp8" if src.dtype in FP8_DTYPES else "max_k"]
        if src.partitions > max_k:
            self._fail(who, f"{tile} K over the limit", f"K={src.partitions} > {max_k}{detail}")

    def _keep_stationary(self, who: str, inst: Instruction) -> None:
        """load_stationary's part that depends on the program so far (STATE_RULES)."""
        self.state.stationary = inst.operands["src"]

    def _against_stationary(self, who: str, inst: Instruction) -> None:
        """multiply_moving's checks against the stationary tile (STATE_RULES), in its rule's order."""
        dst, src = inst.operands["dst"], inst.operands["src"]
        stationary = self.state.stationary
        if stationary is None:
            self._fail(who, "multiply_moving without a stationary tile", "no load_stationary before it")
        if src.partitions != stationary.partitions:
            self._fail(who, "K of moving differs from K of stationary",
                       f"{src.partitions} vs {stationary.partitions}")
        if dst.partitions != free_size(stationary):
            self._fail(who, "dst partitions must equal stationary M",
                       f"{dst.partitions} vs M={free_size(stationary)}")

    def _multiply_moving(self, who: str, inst: Instruction) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        if self.state.stationary is None:
            self._fail(who, "multiply_moving without a stationary tile", "no load_stationary before it")
        self._pe_dtype(who, inst)
        self._k_limit(who, src, "moving", f" for {src.dtype}")
        if free_size(src) > self.pe["max_n"]:
            self._fail(who, "moving N over the limit", f"N={free_size(src)} > {self.pe['max_n']}")
        self._against_stationary(who, inst)
        if free_size(dst) != free_size(src):
            self._fail(who, "dst free size must equal moving N", f"{free_size(dst)} vs N={free_size(src)}")
        if dst.dtype != "f32":
            self._fail(who, "matmul dst must be f32 (PSUM accumulates in fp32)", dst.dtype)
        self._psum_bank(who, "matmul", dst)

    def _transpose(self, who: str, inst: Instruction) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        self._pe_dtype(who, inst)
        parts, free = src.partitions, free_size(src)
        if parts > self.pe["max_k"] or free > self.pe["max_m"]:
            self._fail(who, "transpose input over the limit",
                       f"[{parts}, {free}] > [{self.pe['max_k']}, {self.pe['max_m']}]")
        if dst.partitions != free or free_size(dst) != parts:
            self._fail(who, "transpose dst must be [F, P] of src [P, F]",
                       f"dst {dst.partitions}x{free_size(dst)}, src {parts}x{free}")
        if dst.dtype not in ("f32", src.dtype):
            self._fail(who, "transpose dst dtype must be f32 or the src dtype", f"dst {dst.dtype}, src {src.dtype}")
        self._psum_bank(who, "transpose", dst)

    def _activation(self, who: str, inst: Instruction) -> None:
        self._same_shape(who, inst, ("dst", "src"))
        for name in ("bias", "scale_vec", "acc"):
            self._per_partition_vector(who, inst, name)
        command = inst.attrs.get("acc_cmd", "idle")
        if "acc" in inst.operands and command not in ("reduce", "reset_reduce"):
            self._fail(who, "an acc operand needs acc_cmd reduce or reset_reduce", f"acc_cmd={command}")

    def _tensor_scalar(self, who: str, inst: Instruction) -> None:
        self._same_shape(who, inst, ("dst", "src"))
        for name in ("scalar_vec", "scalar1_vec"):
            self._per_partition_vector(who, inst, name)
        if "scalar1_vec" in inst.operands and inst.attrs.get("op1", NO_OP) == NO_OP:
            self._fail(who, "operand scalar1_vec needs a second operation", f"op1={NO_OP}")

    def _tensor_reduce(self, who: str, inst: Instruction) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        axes_attr = inst.attrs.get("axes", ALL_AXES)
        try:
            axes = reduce_axes(str(axes_attr), len(src.pattern))
        except ValueError as e:
            problem = str(e)
        else:
            problem = ""
        if problem:
            self._fail(who, "bad reduce axes", f"{problem} (src has {len(src.pattern)} free dimensions)")
        kept = prod(count for axis, (_, count) in enumerate(src.pattern) if axis not in axes)
        if axes_attr == ALL_AXES and (dst.partitions != src.partitions or free_size(dst) != 1):
            self._fail(who, "reduce dst must be [P, 1] of the src partitions",
                       f"dst {dst.partitions}x{free_size(dst)}, src {src.partitions} partitions")
        if dst.partitions != src.partitions or free_size(dst) != kept:
            self._fail(who, "reduce dst must hold the src partitions x the kept elements",
                       f"dst {dst.partitions}x{free_size(dst)}, src {src.partitions}x{kept} kept")

    def _transpose32(self, who: str, inst: Instruction) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        parts, free = src.partitions, free_size(src)
        if parts <= BLOCK and free <= BLOCK:
            want = (free, parts)
        elif parts % BLOCK or free % BLOCK:
            self._fail(who, f"transpose32 needs one block (P, F <= {BLOCK}) or P and F multiples of {BLOCK}",
                       f"src {parts}x{free}")
        else:
            want = (parts, free)
        if (dst.partitions, free_size(dst)) != want:
            self._fail(who, "transpose32 dst has the wrong shape",
                       f"dst {dst.partitions}x{free_size(dst)}, expected {want[0]}x{want[1]} for src {parts}x{free}")

    def _stats_shapes(self, who: str, inst: Instruction, width: int) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        if dst.partitions != src.partitions or free_size(dst) != width:
            self._fail(who, f"{inst.opcode} dst must be [P, {width}] of the src partitions",
                       f"dst {dst.partitions}x{free_size(dst)}, src {src.partitions} partitions")

    def _bn_stats(self, who: str, inst: Instruction) -> None:
        limit = self.stream["bn_stats_max_free"]
        free = free_size(inst.operands["src"])
        if free > limit:
            self._fail(who, "bn_stats free size over the limit", f"{free} elements > {limit}")
        self._stats_shapes(who, inst, 6)

    def _bn_aggr(self, who: str, inst: Instruction) -> None:
        free = free_size(inst.operands["src"])
        if free % 3:
            self._fail(who, "bn_aggr src must hold (count, mean, variance * count) triples",
                       f"{free} elements per partition")
        self._stats_shapes(who, inst, 2)

    def _partition_reduce(self, who: str, inst: Instruction) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        if free_size(dst) != free_size(src):
            self._fail(who, "partition_reduce dst must have the src free size",
                       f"{free_size(dst)} vs {free_size(src)}")

    def _dma(self, who: str, inst: Instruction) -> None:
        dst, src = inst.operands["dst"], inst.operands["src"]
        queues = self.dma_queues
        queue = inst.attrs.get("queue", 0)
        if not 0 <= queue < queues:
            self._fail(who, "DMA queue out of range", f"queue {queue}, target has {queues}")
        if dst.dtype != src.dtype:
            self._fail(who, "DMA sides differ in dtype", f"dst {dst.dtype}, src {src.dtype}")
        if dst.partitions != src.partitions or free_size(dst) != free_size(src):
            self._same_shape(who, inst, ("dst", "src"))  # its message


def _no_rule(checker: RuleChecker, who: str, inst: Instruction) -> None:
    """Opcodes with no rule beyond the operand checks."""


# the part of an opcode's rule that reads or writes the DecodeState (what came before along the program), checked
# again for an instruction identical to one that passed its whole rule; the rest of a rule is a function of the
# instruction alone. A rule that comes to use the DecodeState gets its entry here.
STATE_RULES: dict[str, Callable[[RuleChecker, str, Instruction], None]] = {
    "load_stationary": RuleChecker._keep_stationary,
    "multiply_moving": RuleChecker._against_stationary,
}

OPCODE_RULES: dict[str, Callable[[RuleChecker, str, Instruction], None]] = {
    "load_stationary": RuleChecker._load_stationary,
    "multiply_moving": RuleChecker._multiply_moving,
    "transpose": RuleChecker._transpose,
    "activation": RuleChecker._activation,
    "tensor_tensor": lambda c, who, inst: c._same_shape(who, inst, ("dst", "a", "b")),
    "tensor_scalar": RuleChecker._tensor_scalar,
    "tensor_copy": lambda c, who, inst: c._same_shape(who, inst, ("dst", "src")),
    "select": lambda c, who, inst: c._same_shape(who, inst, ("dst", "pred", "a", "b")),
    "affine_select": lambda c, who, inst: c._same_shape(who, inst, ("dst", "src")),
    "tensor_reduce": RuleChecker._tensor_reduce,
    "partition_reduce": RuleChecker._partition_reduce,
    "transpose32": RuleChecker._transpose32,
    "bn_stats": RuleChecker._bn_stats,
    "bn_aggr": RuleChecker._bn_aggr,
    "dma": RuleChecker._dma,
}
