"""The instruction table: one entry per opcode drives the assembler, encoder, emulator and docs.

Engine/memory rules from machine-model.md ("Engines and their instruction streams"): PE reads only
SBUF and writes only PSUM; POOL cannot touch PSUM; DMA (issued by SP) moves between any memories.

The table only grows: opcodes, operands and attributes are added (new operands optional, new
attributes with a default and ``optional=True``), never renamed or given another meaning, so that
programs written against an older table keep assembling, printing and running the same.
"""

from __future__ import annotations

from dataclasses import dataclass

ON_CHIP = ("sbuf", "psum")
ANY_MEMORY = ("sbuf", "psum", "hbm")

ACTIVATION_FUNCS = (
    "identity", "copy", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "exp", "log",
    "sqrt", "rsqrt", "reciprocal", "square", "silu",
    "sin", "cos", "tan", "arctan", "erf", "cbrt", "floor", "ceil", "round_even", "round_afz", "abs", "sign",
)
COMPARE_OPS = ("is_equal", "not_equal", "is_gt", "is_ge", "is_lt", "is_le")
ALU_OPS = (
    "add", "subtract", "multiply", "divide", "max", "min", "pow", *COMPARE_OPS,
    "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
    "remainder", "shift_left", "shift_right_logical", "shift_right_arith",
)
ROUNDINGS = ("nearest", "zero")  # tensor_copy to an integer type: nearest even, or toward zero (XLA's convert)
MATH_MODES = ("fp32", "int")  # math=int: GpSimd's exact integer mode (POOL, integer or pred operands only)
# machine-model.md "Start partition rule": (largest partition count, allowed start partitions)
START_PARTITIONS: tuple[tuple[int, tuple[int, ...]], ...] = (
    (32, (0, 32, 64, 96)),
    (64, (0, 64)),
    (128, (0,)),
)


def allowed_starts(count: int) -> tuple[int, ...]:
    """The start partitions a compute engine may use for an access of `count` partitions."""
    for largest, starts in START_PARTITIONS:
        if count <= largest:
            return starts
    return ()


def start_partition_allowed(start: int, count: int) -> bool:
    """Whether compute engines may address partitions [start, start + count)."""
    return start in allowed_starts(count)


REDUCE_OPS = ("add", "max", "min")
# dma_indirect (helper `indirect`): which side the index tile addresses, out-of-range rows (NKI's
# oob_mode: error or skip), and the destination read-modify-write (NKI dma_copy's dst_rmw_op: add)
INDIRECT_SIDES = ("src", "dst")
OOB_MODES = ("error", "skip")
DMA_RMW_OPS = ("none", "add")
DMA_OPCODES = ("dma", "dma_indirect")  # the opcodes that are DMA transfers on a queue
# control flow (helper `control`): registers per engine stream, and the ALU ops of reg_op
REGISTERS = 16
REG_OPS = ("add", "subtract", "multiply", "max", "min", *COMPARE_OPS, "bitwise_and", "bitwise_or")
ENGINES_ALL = ("pe", "act", "dve", "pool", "sp")
CONTROL_OPCODES = ("reg_set", "reg_load", "reg_op", "branch", "jump", "loop", "sem_wait", "sem_reset")
BRANCH_OPCODES = ("branch", "jump", "loop")
# ACT's per-partition accumulator registers (NKI reduce_cmd): leave, zero, add the outputs' sum,
# or zero then add.
ACC_COMMANDS = ("idle", "reset", "reduce", "reset_reduce")
NO_OP = "none"  # tensor_scalar's op1 when there is no second operation
ALL_AXES = "all"  # tensor_reduce's axes: every free axis of src


@dataclass(frozen=True)
class OperandSpec:
    name: str
    access: str  # "r" or "w"
    memories: tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class AttrSpec:
    """An attribute; ``optional`` ones were added to an existing opcode later and are left out of
    the text form while they hold their default (so older programs print unchanged)."""

    name: str
    kind: type  # int, float or str
    default: int | float | str | None = None  # None: required
    choices: tuple[str, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class OpcodeSpec:
    name: str
    engines: tuple[str, ...]
    operands: tuple[OperandSpec, ...]
    attrs: tuple[AttrSpec, ...]
    cost: str  # key of the timing rule in isa.emulator.timing.COSTS
    code: int  # stable id for the binary encoding
    doc: str

    def operand(self, name: str) -> OperandSpec:
        for spec in self.operands:
            if spec.name == name:
                return spec
        raise KeyError(f"{self.name} has no operand {name!r}")


def _op(name, engines, operands, attrs, cost, code, doc) -> OpcodeSpec:
    return OpcodeSpec(name, tuple(engines), tuple(operands), tuple(attrs), cost, code, doc)


R, W = "r", "w"


def _vector(name: str) -> OperandSpec:
    """An optional per-partition [P, 1] operand read from SBUF or PSUM."""
    return OperandSpec(name, R, ON_CHIP, optional=True)


OPCODES: dict[str, OpcodeSpec] = {
    spec.name: spec
    for spec in (
        _op("load_stationary", ["pe"], [OperandSpec("src", R, ("sbuf",))], [], "pe_load", 1,
            "Load a [K, M] tile (K partitions <= 128, or <= 256 for fp8 where the target allows it; "
            "M free <= 128) into the systolic array as the stationary operand of the following "
            "multiply_moving instructions."),
        _op("multiply_moving", ["pe"],
            [OperandSpec("dst", W, ("psum",)), OperandSpec("src", R, ("sbuf",))],
            [AttrSpec("acc", int, 0)], "pe_matmul", 2,
            "dst[M, N] (+)= stationary[K, M]^T @ src[K, N] in fp32; N <= 512 and dst within one "
            "2 KiB PSUM bank. acc=0 overwrites (starts an accumulation), acc=1 adds."),
        _op("activation", ["act"],
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP), _vector("bias"),
             _vector("scale_vec"), OperandSpec("acc", W, ON_CHIP, optional=True)],
            [AttrSpec("func", str, "identity", ACTIVATION_FUNCS), AttrSpec("scale", float, 1.0),
             AttrSpec("acc_cmd", str, "idle", ACC_COMMANDS, optional=True)],
            "stream1", 3,
            "dst = func(src * scale + bias): scale is the immediate `scale`, or the per-partition "
            "[P, 1] vector `scale_vec` when given; bias is a per-partition [P, 1] vector (0 if absent). "
            "ACT keeps one fp32 accumulator register per partition (zero at start): `acc_cmd` "
            "`reset` zeroes it, `reduce` adds the fp32 sum of this instruction's outputs over the "
            "free axes, `reset_reduce` does both, `idle` leaves it. An `acc` [P, 1] operand "
            "(allowed with `reduce` or `reset_reduce`) receives the registers afterwards "
            "(ActReadAccumulator, extra cycles from the target file)."),
        _op("tensor_tensor", ("dve", "pool"),
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("a", R, ON_CHIP), OperandSpec("b", R, ON_CHIP)],
            [AttrSpec("op", str, None, ALU_OPS), AttrSpec("math", str, "fp32", MATH_MODES, optional=True)],
            "stream2", 4,
            "dst = a <op> b elementwise (fp32 math; comparisons and logical ops give 1.0 or 0.0; "
            "bitwise ops and shifts work on the values as 32-bit integers; remainder has the sign of a). "
            "`math=int` (POOL only; a, b and dst integer types or pred): exact integer math with "
            "two's-complement wrap to dst's type and XLA's rules: x / 0 = -1, x % 0 = x, "
            "INT_MIN / -1 = INT_MIN, shifts by amounts outside 0..bits-1 of a's type give 0 (arithmetic "
            "right: the sign). POOL may not touch PSUM."),
        _op("tensor_scalar", ("dve", "pool"),
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP), _vector("scalar_vec"),
             _vector("scalar1_vec")],
            [AttrSpec("op", str, None, ALU_OPS), AttrSpec("scalar", float, None),
             AttrSpec("op1", str, NO_OP, (NO_OP, *ALU_OPS), optional=True),
             AttrSpec("scalar1", float, 0.0, optional=True),
             AttrSpec("math", str, "fp32", MATH_MODES, optional=True),
             # ints: exact 64-bit immediates of the integer mode (added to scalar / scalar1)
             AttrSpec("iscalar", int, 0, optional=True), AttrSpec("iscalar1", int, 0, optional=True)],
            "stream1", 5,
            "dst = (src <op> scalar) <op1> scalar1 elementwise, in fp32 (op1=none: no second "
            "operation). Each scalar is the immediate attribute, or the per-partition [P, 1] vector "
            "operand `scalar_vec` / `scalar1_vec` when given. `math=int`: tensor_tensor's exact "
            "integer mode (immediates must be integers). There the immediate is scalar + iscalar (and "
            "scalar1 + iscalar1), exact 64-bit integers wrapped to 64 bits: an integer beyond fp64's 2^53 goes "
            "in iscalar."),
        _op("tensor_copy", ("act", "dve", "pool"),
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [AttrSpec("round", str, "nearest", ROUNDINGS, optional=True),
             AttrSpec("math", str, "fp32", MATH_MODES, optional=True)], "stream1", 6,
            "dst = src, converting dtype (round to nearest even; fp8 saturates; integers saturate; "
            "pred stores src != 0). `round=zero`: float to integer truncates toward zero, saturates "
            "and turns NaN into 0 (XLA's convert). `math=int` (POOL, integer or pred types): integer "
            "to integer keeps the low bits (two's-complement wrap, XLA's convert)."),
        _op("tensor_reduce", ("dve",),
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [AttrSpec("op", str, None, REDUCE_OPS),
             AttrSpec("axes", str, ALL_AXES, optional=True)], "stream1", 7,
            "dst = reduction of src over free axes in fp32. `axes` is `all` (dst[P, 1]) or the "
            "comma-separated indices of src's free dimensions to reduce, 0 the outermost (e.g. "
            "\"1\" or \"0,2\"); dst holds the kept elements in src order."),
        _op("memset", ("dve", "pool"), [OperandSpec("dst", W, ON_CHIP)],
            [AttrSpec("value", float, 0.0),
             AttrSpec("ivalue", int, 0, optional=True)],  # ints: exact 64-bit integer fills
            "stream1", 8,
            "Fill dst with a constant (rounded and saturated to dst's type). An integer dst whose value is "
            "integral gets value + ivalue exactly (an integer beyond fp64's 2^53 goes in ivalue)."),
        _op("iota", ("pool", "dve"), [OperandSpec("dst", W, ON_CHIP)],
            [AttrSpec("base", int, 0), AttrSpec("channel_multiplier", int, 0)], "stream1", 9,
            "dst[p, i] = base + channel_multiplier * p + i (p: partition within dst, i: flat free "
            "index)."),
        _op("dma", ("sp",), [OperandSpec("dst", W, ANY_MEMORY), OperandSpec("src", R, ANY_MEMORY)],
            [AttrSpec("queue", int, 0)], "dma", 10,
            "Trigger a transfer of src to dst on DMA queue `queue` (0..15). Same element count "
            "per side and same dtype; the transfer's signals fire when it completes."),
        _op("nop", ("pe", "act", "dve", "pool", "sp"), [], [], "sync", 11,
            "Do nothing; used to wait on or signal semaphores."),
        _op("transpose", ("pe",), [OperandSpec("dst", W, ("psum",)), OperandSpec("src", R, ("sbuf",))],
            [], "pe_transpose", 12,
            "dst[F, P] = src[P, F]^T (P, F <= 128) into one PSUM bank; dst is f32 or src's dtype. "
            "Timed as a matmul against an identity on targets without a native transpose mode; "
            "the stationary tile of load_stationary is kept."),
        _op("select", ("dve", "pool"),
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("pred", R, ON_CHIP),
             OperandSpec("a", R, ON_CHIP), OperandSpec("b", R, ON_CHIP)], [], "stream3", 13,
            "dst = pred != 0 ? a : b elementwise (values are moved exactly when the dtypes agree)."),
        _op("transpose32", ("dve",), [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [], "stream1", 14,
            "Transpose within 32x32 blocks of partitions x free elements: src [P, F] with P, F "
            "multiples of 32 gives dst [P, F] with every block transposed in place; a single block "
            "P, F <= 32 gives dst [F, P]."),
        _op("bn_stats", ("dve",), [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [], "stream1", 15,
            "Per-partition statistics of src [P, F] (F <= the target's bn_stats limit, 512) in fp32, "
            "as NKI defines them: dst [P, 6] = (count, mean, variance * count) of the even-indexed "
            "free elements, then the same of the odd-indexed ones."),
        _op("bn_aggr", ("dve",), [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [], "stream1", 16,
            "Combine the (count, mean, variance * count) triples of src [P, 3k] (bn_stats outputs "
            "side by side) into dst [P, 2] = (mean, variance) per partition, in fp32."),
        _op("affine_select", ("pool",), [OperandSpec("dst", W, ("sbuf",)), OperandSpec("src", R, ("sbuf",))],
            [AttrSpec("cmp", str, "is_ge", COMPARE_OPS), AttrSpec("offset", int, 0),
             AttrSpec("channel_multiplier", int, 0), AttrSpec("free_multiplier", int, 1),
             AttrSpec("fill", float, None)], "stream1", 17,
            "dst[p, i] = src[p, i] where (offset + channel_multiplier * p + free_multiplier * i) "
            "<cmp> 0 holds, else `fill` (p: partition within dst, i: flat free index); e.g. a "
            "causal mask keeps p - i >= 0."),
        _op("partition_reduce", ("pool",), [OperandSpec("dst", W, ("sbuf",)), OperandSpec("src", R, ("sbuf",))],
            [AttrSpec("op", str, None, REDUCE_OPS)], "stream1", 18,
            "Reduce src [P, F] across its partitions in fp32; every partition of dst [Q, F] "
            "receives the result (Q = 1 for a plain reduction)."),
        # -- helper `indirect`: indirect DMA, rows addressed by offsets read from an SBUF index tile --
        _op("dma_indirect", ("sp",),
            [OperandSpec("dst", W, ANY_MEMORY), OperandSpec("src", R, ANY_MEMORY),
             OperandSpec("index", R, ("sbuf",))],
            [AttrSpec("queue", int, 0), AttrSpec("side", str, "src", INDIRECT_SIDES),
             AttrSpec("oob", str, "error", OOB_MODES), AttrSpec("rmw", str, "none", DMA_RMW_OPS)],
            "dma", 32,
            "A DMA whose `side` operand (`src`: a gather/load, `dst`: a scatter/store) is an HBM access "
            "`hbm:T@OFF[S,P][free...]` addressed per row by the integer index tile `index` [P, 1] in SBUF: "
            "row p is the free pattern starting at element OFF/size + index[p] * S (S >= 1; S = 1 makes "
            "the index an element offset), instead of OFF/size + p * S. The other side is a plain [P x "
            "free] access of the same element count and dtype. A row is in range when every byte it "
            "touches lies in T; `oob=error` stops the program on an out-of-range row, `oob=skip` moves "
            "nothing for it (a gathered row is left unwritten, a scattered one dropped). `rmw=add` (side "
            "dst only) adds src into the rows instead of overwriting them (dst = dst + src in dst's type: "
            "floats in fp32 rounded per row, integers wrapping); rows are applied in partition order, so "
            "repeated indices accumulate and, with `rmw=none`, the last one wins. The index tile is read "
            "when the transfer starts (checked mode checks it was written, and checks the rows actually "
            "moved for never-written bytes and races). Out-of-range indices are the compiler's to handle as "
            "XLA does: it clamps gather and dynamic-slice indices on chip (then `oob=error`) and gives a "
            "scatter row with an out-of-range index a negative offset (then `oob=skip`). Timing (assumed; "
            "machine-model.md has no indirect-DMA figures): the `dma` class's SP trigger, fixed ~1.3 us and "
            "queue rate, with `descriptor_overhead_bytes` (256 B) per contiguous run of every row, so a "
            "gather of R rows of B bytes costs like R descriptors of B bytes (small rows slow, rows of a "
            "few KiB near the queue rate); descriptors are generated by the DMA hardware (NKI's hardware "
            "DGE) at no compute-engine cost; `rmw=add` moves the destination rows twice (read and write). "
            "Unlike NKI's dma_copy, `oob=skip` is allowed with `rmw=add`."),
        # ---- control (helper `control`): scalar registers, loops, branches, semaphore waits and resets ----
        # Each engine stream has REGISTERS int32 registers; branch targets are labels (Instruction.label)
        # of the same engine's stream. Codes from 64 keep clear of other helpers' additions.
        _op("reg_set", ENGINES_ALL, [], [AttrSpec("reg", int, None), AttrSpec("value", int, None)],
            "control", 64, "reg = value (a 32-bit signed immediate) in this engine stream's register file."),
        _op("reg_load", ENGINES_ALL, [OperandSpec("src", R, ("sbuf",))], [AttrSpec("reg", int, None)],
            "reg_load", 65,
            "reg = the first element of src (its start partition, first free element) as int32: integer "
            "and pred values exactly (wrapping to 32 bits), floats truncated toward zero, saturated, NaN "
            "-> 0. The read is an SBUF access like any other: order it after the writer with a wait."),
        _op("reg_op", ENGINES_ALL, [],
            [AttrSpec("reg", int, None), AttrSpec("a", int, None), AttrSpec("op", str, None, REG_OPS),
             AttrSpec("b", int, -1), AttrSpec("imm", int, 0)], "control", 66,
            "reg = a <op> (register b, or the immediate imm when b = -1) in 32-bit two's-complement "
            "integer math; comparisons give 1 or 0."),
        _op("branch", ENGINES_ALL, [],
            [AttrSpec("reg", int, None), AttrSpec("cmp", str, None, COMPARE_OPS), AttrSpec("imm", int, 0),
             AttrSpec("target", str, None)], "branch", 67,
            "Continue this engine's stream at the instruction labelled `target` when reg <cmp> imm "
            "holds, else with the next instruction."),
        _op("jump", ENGINES_ALL, [], [AttrSpec("target", str, None)], "branch", 68,
            "Continue this engine's stream at the instruction labelled `target`."),
        _op("loop", ENGINES_ALL, [], [AttrSpec("reg", int, None), AttrSpec("target", str, None)], "branch", 69,
            "The end of a counted loop: reg = reg - 1, then continue at `target` (the body's first "
            "instruction) while reg > 0. `reg_set reg=r value=N` before the body runs it N times."),
        _op("sem_wait", ENGINES_ALL, [],
            [AttrSpec("sem", int, None), AttrSpec("reg", int, None), AttrSpec("imm", int, 0)], "sync", 70,
            "Wait until semaphore `sem` >= register reg + imm (a wait whose value grows as the register "
            "counts loop trips), as a nop."),
        _op("sem_reset", ENGINES_ALL, [], [AttrSpec("first", int, None), AttrSpec("count", int, None)],
            "sync", 71,
            "Set semaphores first .. first+count-1 to 0 when the instruction completes (before its own "
            "signals fire): a loop body whose streams all passed a barrier reuses its semaphore "
            "counts each trip."),
    )
}
OPCODE_BY_CODE = {spec.code: spec for spec in OPCODES.values()}


def opcode(name: str) -> OpcodeSpec:
    try:
        return OPCODES[name]
    except KeyError:
        raise KeyError(f"unknown opcode {name!r}") from None


def indirect_side(inst_opcode: str, attrs: dict) -> str | None:
    """The operand a ``dma_indirect`` addresses through its index tile (None for every other opcode)."""
    if inst_opcode != "dma_indirect":
        return None
    return str(attrs.get("side", "src"))


def reduce_axes(axes: str, rank: int) -> tuple[int, ...]:
    """The free axes a tensor_reduce ``axes`` attribute names for a src of ``rank`` free dims.

    Raises ValueError when ``axes`` is neither ``all`` nor distinct in-range indices.
    """
    if axes == ALL_AXES:
        return tuple(range(rank))
    try:
        picked = tuple(int(part) for part in axes.split(","))
    except ValueError:
        raise ValueError(f"axes={axes!r} is not 'all' or comma-separated integers") from None
    if len(set(picked)) != len(picked) or not all(0 <= a < rank for a in picked):
        raise ValueError(f"axes={axes!r} must name distinct free axes of src, 0..{rank - 1}")
    return tuple(sorted(picked))
