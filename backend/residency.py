"""Keeping tensors between kernels on chip, spilling the rest to HBM (a memory-space assignment).

The backend lowers the module twice. The first pass (the survey) writes every value between kernels to
an HBM scratch tensor and records every DMA touching one, and how much SBUF each kernel's own pools
take. A scratch tensor can live in SBUF instead when every access to it fits one *image*: rows of
`row` elements (row = the partition stride its tiles are stored with) on partitions r % 128, row
blocks side by side along the free dim,

    element (r, c)  ->  partition r % 128, byte offset + ((r // 128) * row + c) * itemsize,

i.e. when producer and consumers tile it with the same axis on the partitions. Candidates are taken
greedily by HBM bytes saved per byte-kernel of SBUF they occupy; each image is placed (best fit over
lifetimes, like XLA's heap simulator: the smallest gap free for its whole life, at its top end) only if
every kernel during its life still finds one contiguous block for its own pools. Images live from the
start of their producer's kernel to the end of their last consumer's. Everything else stays in HBM:
written once by its producer, read by each consumer.

In the final pass the builder redirects the DMAs of resident tensors to their images (SBUF to SBUF
transfers, no HBM traffic), and the allocator places each kernel's pools in the space images leave.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from isa.dtypes import dtype as isa_dtype
from isa.program import AccessPattern, Instruction

ALIGN = 64


class ResidencyMismatch(Exception):  # noqa: N818 (a control-flow signal, not an error for the user)
    """The final pass made an access to a resident tensor that its image cannot serve (a kernel tiled
    differently than in the survey); the planner drops the tensor and lowers again."""

    def __init__(self, tensor: str):
        super().__init__(tensor)
        self.tensor = tensor


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class Access:
    kernel: int
    ap: AccessPattern  # the HBM side of a DMA
    write: bool


@dataclass
class Survey:
    """What the first pass saw: DMAs touching scratch tensors, and each kernel's SBUF/PSUM need."""

    accesses: dict[str, list[Access]] = field(default_factory=dict)
    needs: list[int] = field(default_factory=list)  # SBUF bytes per partition of kernel k's pools
    staged: list[dict[str, int]] = field(default_factory=list)  # of those, bytes staging each scratch tensor
    persistent_bytes: int = 0  # per partition, at the top of SBUF, at the end of the program

    def record(self, kernel: int, inst: Instruction, scratch: Collection[str]) -> None:
        for name, write in (("dst", True), ("src", False)):
            ap = inst.operands[name]
            if ap.memory == "hbm" and ap.tensor in scratch:
                self.accesses.setdefault(ap.tensor, []).append(Access(kernel, ap, write))


@dataclass(frozen=True)
class Image:
    """A scratch tensor held in SBUF (see the module docstring)."""

    tensor: str
    dtype: str
    rows: int
    row: int
    first: int  # kernel indices of its life
    last: int
    saved: int  # HBM bytes its DMAs would have moved
    offset: int = 0  # bytes within every partition
    partitions: int = 128

    @property
    def nbytes(self) -> int:
        """Bytes per partition."""
        return _align(-(-self.rows // self.partitions) * self.row * isa_dtype(self.dtype).itemsize)

    def live(self, kernel: int) -> bool:
        return self.first <= kernel <= self.last

    def translate(self, ap: AccessPattern) -> AccessPattern | None:
        """The SBUF access of the image equal to the HBM access `ap`, or None if it does not fit."""
        item = isa_dtype(self.dtype).itemsize
        if ap.offset % item or (ap.partitions > 1 and ap.partition_stride != self.row):
            return None
        r0, c0 = divmod(ap.offset // item, self.row)
        if r0 % self.partitions + ap.partitions > self.partitions:
            return None
        if any(s < 0 for s, _ in ap.pattern):
            return None
        if c0 + sum((c - 1) * s for s, c in ap.pattern) >= self.row:
            return None
        return AccessPattern("sbuf", ap.dtype, self.offset + ((r0 // self.partitions) * self.row + c0) * item,
                             ap.pattern, start_partition=r0 % self.partitions, partitions=ap.partitions)


def _candidate(name: str, dtype: str, size: int, accesses: list[Access], parts: int) -> Image | None:
    strides = {a.ap.partition_stride for a in accesses if a.ap.partitions > 1}
    if len(strides) > 1:
        return None
    row = strides.pop() if strides else size
    if row <= 0 or size % row or not any(a.write for a in accesses):
        return None
    kernels = [a.kernel for a in accesses]
    saved = sum(a.ap.nbytes for a in accesses)
    image = Image(name, dtype, size // row, row, min(kernels), max(kernels), saved, partitions=parts)
    if all(image.translate(a.ap) is not None for a in accesses):
        return image
    return None


def _largest_gap(capacity: int, used: list[tuple[int, int]]) -> int:
    gap, pos = 0, 0
    for lo, hi in sorted(used):
        gap = max(gap, lo - pos)
        pos = max(pos, hi)
    return max(gap, capacity - pos)


def _place(images: list[Image], survey: Survey, capacity: int) -> list[Image] | None:
    """Offsets for `images` (best fit, by start), or None when some kernel would not find
    a contiguous block for its pools (less the pools staging tensors that become images)."""
    placed: list[Image] = []
    for image in sorted(images, key=lambda i: (i.first, -i.nbytes)):
        # lives of adjacent kernels count as overlapping: a kernel starts while the one before it still
        # runs, so an image its producer writes must not share bytes with one the previous kernel reads
        busy = sorted((p.offset, p.offset + p.nbytes) for p in placed
                      if p.first <= image.last + 1 and image.first <= p.last + 1)
        gaps, pos = [], 0
        for lo, hi in busy:  # free over the image's whole life
            if lo > pos:
                gaps.append((pos, lo))
            pos = max(pos, hi)
        gaps.append((pos, capacity))
        fitting = [(hi - lo, -hi, lo, hi) for lo, hi in gaps if hi - lo >= image.nbytes]
        if not fitting:
            return None
        _, _, _, hi = min(fitting)  # best fit: the smallest gap; ties: the highest (kernel pools go low)
        placed.append(replace(image, offset=hi - image.nbytes))
    chosen = {i.tensor for i in images}
    for k, need in enumerate(survey.needs):
        staged = survey.staged[k] if k < len(survey.staged) else {}
        need -= sum(n for t, n in staged.items() if t in chosen)
        used = [(p.offset, p.offset + p.nbytes) for p in placed if p.live(k)]
        if used and _largest_gap(capacity, used) < need:
            return None
    return placed


def plan_residency(survey: Survey, tensors: dict[str, tuple[str, int]], sbuf_bytes: int, parts: int,
                   excluded: frozenset[str] = frozenset()) -> list[Image]:
    """The scratch tensors (name -> (dtype, elements)) to keep in SBUF, placed; never `excluded` ones."""
    capacity = sbuf_bytes - survey.persistent_bytes
    candidates = []
    for name, accesses in survey.accesses.items():
        if name in excluded:
            continue
        dtype, size = tensors[name]
        image = _candidate(name, dtype, size, accesses, parts)
        if image is not None and image.nbytes <= capacity:
            candidates.append(image)
    candidates.sort(key=lambda i: (-i.saved / (i.nbytes * (i.last - i.first + 1)), i.first, i.tensor))
    chosen: list[Image] = []
    for image in candidates:
        trial = _place(chosen + [image], survey, capacity)
        if trial is not None:
            chosen = trial
    return chosen
