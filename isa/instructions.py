"""The instruction table: one entry per opcode drives the assembler, encoder, emulator and docs.

Engine/memory rules from machine-model.md ("Engines and their instruction streams"): PE reads only
SBUF and writes only PSUM; POOL cannot touch PSUM; DMA (issued by SP) moves between any memories.
"""

from __future__ import annotations

from dataclasses import dataclass

ON_CHIP = ("sbuf", "psum")
ANY_MEMORY = ("sbuf", "psum", "hbm")

ACTIVATION_FUNCS = (
    "identity", "copy", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "exp", "log",
    "sqrt", "rsqrt", "reciprocal", "square", "silu",
)
ALU_OPS = (
    "add", "subtract", "multiply", "divide", "max", "min", "pow",
    "is_equal", "not_equal", "is_gt", "is_ge", "is_lt", "is_le",
    "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
)
REDUCE_OPS = ("add", "max", "min")


@dataclass(frozen=True)
class OperandSpec:
    name: str
    access: str  # "r" or "w"
    memories: tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: type  # int, float or str
    default: int | float | str | None = None  # None: required
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpcodeSpec:
    name: str
    engines: tuple[str, ...]
    operands: tuple[OperandSpec, ...]
    attrs: tuple[AttrSpec, ...]
    cost: str  # key of the timing rule in isa.emulator (pe_load, pe_matmul, stream1, stream2, dma, sync)
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
_ENGINES_ELEMENTWISE = ("act", "dve", "pool")

OPCODES: dict[str, OpcodeSpec] = {
    spec.name: spec
    for spec in (
        _op("load_stationary", ["pe"], [OperandSpec("src", R, ("sbuf",))], [], "pe_load", 1,
            "Load a [K, M] tile (K partitions <= 128, M free <= 128) into the systolic array as the "
            "stationary operand of the following multiply_moving instructions."),
        _op("multiply_moving", ["pe"],
            [OperandSpec("dst", W, ("psum",)), OperandSpec("src", R, ("sbuf",))],
            [AttrSpec("acc", int, 0)], "pe_matmul", 2,
            "dst[M, N] (+)= stationary[K, M]^T @ src[K, N] in fp32; N <= 512 and dst within one "
            "2 KiB PSUM bank. acc=0 overwrites (starts an accumulation), acc=1 adds."),
        _op("activation", ["act"],
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP),
             OperandSpec("bias", R, ON_CHIP, optional=True),
             OperandSpec("scale_vec", R, ON_CHIP, optional=True)],
            [AttrSpec("func", str, "identity", ACTIVATION_FUNCS), AttrSpec("scale", float, 1.0)],
            "stream1", 3,
            "dst = func(src * scale + bias): scale is the immediate `scale`, or the per-partition "
            "[P, 1] vector `scale_vec` when given; bias is a per-partition [P, 1] vector (0 if absent)."),
        _op("tensor_tensor", _ENGINES_ELEMENTWISE[1:],
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("a", R, ON_CHIP), OperandSpec("b", R, ON_CHIP)],
            [AttrSpec("op", str, None, ALU_OPS)], "stream2", 4,
            "dst = a <op> b elementwise (fp32 math). POOL may not touch PSUM."),
        _op("tensor_scalar", _ENGINES_ELEMENTWISE[1:],
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [AttrSpec("op", str, None, ALU_OPS), AttrSpec("scalar", float, None)], "stream1", 5,
            "dst = src <op> scalar elementwise."),
        _op("tensor_copy", _ENGINES_ELEMENTWISE,
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)], [], "stream1", 6,
            "dst = src, converting dtype (round to nearest even; fp8 saturates)."),
        _op("tensor_reduce", ("dve",),
            [OperandSpec("dst", W, ON_CHIP), OperandSpec("src", R, ON_CHIP)],
            [AttrSpec("op", str, None, REDUCE_OPS)], "stream1", 7,
            "dst[P, 1] = reduction of src[P, ...] over all its free elements."),
        _op("memset", ("dve", "pool"), [OperandSpec("dst", W, ON_CHIP)],
            [AttrSpec("value", float, 0.0)], "stream1", 8, "Fill dst with a constant."),
        _op("iota", ("pool",), [OperandSpec("dst", W, ("sbuf",))],
            [AttrSpec("base", int, 0), AttrSpec("channel_multiplier", int, 0)], "stream1", 9,
            "dst[p, i] = base + channel_multiplier * p + i (i: flat free index)."),
        _op("dma", ("sp",), [OperandSpec("dst", W, ANY_MEMORY), OperandSpec("src", R, ANY_MEMORY)],
            [AttrSpec("queue", int, 0)], "dma", 10,
            "Trigger a transfer of src to dst on DMA queue `queue` (0..15). Same element count "
            "per side and same dtype; the transfer's signals fire when it completes."),
        _op("nop", ("pe", "act", "dve", "pool", "sp"), [], [], "sync", 11,
            "Do nothing; used to wait on or signal semaphores."),
    )
}
OPCODE_BY_CODE = {spec.code: spec for spec in OPCODES.values()}


def opcode(name: str) -> OpcodeSpec:
    try:
        return OPCODES[name]
    except KeyError:
        raise KeyError(f"unknown opcode {name!r}") from None
