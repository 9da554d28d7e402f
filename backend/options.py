"""Tunable knobs of the backend: tile sizes, buffer counts and budgets a researcher may change."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendOptions:
    """Timing-critical choices of the backend.

    PE figures (128 partitions, 128-wide stationary, 512-wide moving, 2 KiB PSUM banks) come from the
    target; these are the policies layered on top of them.
    """

    # -- dot kernels ------------------------------------------------------------------------------------
    moving_tile: int = 512  # free size of one multiply_moving (<= target pe.max_n)
    group_banks: int = 4  # max moving tiles (PSUM banks) accumulated under one load_stationary
    max_stationary_blocks: int = 8  # max 128-wide stationary blocks per super-block (reuse of a streamed moving tile)
    psum_acc_banks: int = 4  # PSUM banks in the rotating accumulator pool (R*G <= half of it)
    psum_transpose_banks: int = 4  # PSUM banks for PE transposes (4 blocks of 128x128 fp32 per bank)
    stationary_buffers: int = 2  # rotating buffers for the stationary operand of one P-block
    stationary_prefetch_bytes: int = 48 * 1024  # per partition: stationary blocks in flight (resident moving)
    # per partition: blocks of constant matmul operands are stored and loaded in groups of about this many bytes
    # (one DMA run each: a run pays the DMA descriptor overhead, 17% of a 1.5 KiB stationary block of K = 768 in
    # bf16, 4% of a 6 KiB moving one)
    const_group_bytes: int = 12 * 1024
    moving_buffers: int = 2  # rotating buffers when the moving operand is streamed
    moving_resident_bytes: int = 96 * 1024  # per partition: keep the moving operand resident below this
    transpose_chunk: int = 512  # columns of a row block loaded per DMA before PE transposes
    strided_dma_max_elements: int = 4096  # below this, read K-minor operands with an element-wise DMA
    output_buffers: int = 4  # rotating SBUF tiles for the results of an epilogue

    # -- elementwise kernels ----------------------------------------------------------------------------
    elementwise_free: int = 2048  # max free elements per partition of one elementwise tile
    elementwise_budget_bytes: int = 96 * 1024  # per partition for one elementwise kernel's tiles

    # -- memory ---------------------------------------------------------------------------------------
    keep_on_chip: bool = True  # keep tensors between kernels in SBUF when they fit (else all go via HBM)

    # -- DMA --------------------------------------------------------------------------------------------
    dma_split_bytes: int = 16 * 1024  # split transfers larger than this across queues (first tiles land sooner)
    dma_queues: int = 16

    # -- memory budget and strategies (backend/registry.py) --------------------------------------------
    sbuf_budget_bytes: int = 0  # SBUF bytes per partition the program may use (0: all of the target's)
    tile_policy: str = "default"  # how each dot/conv kernel is tiled (registry.TILE_POLICIES)
    # per-shape tile choices (the autotuner's): ((KernelShape.key, ((field, value), ...)), ...)
    tile_overrides: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    memory_planner: str = "residency"  # which tensors between kernels stay in SBUF (registry.MEMORY_PLANNERS)

    # -- scheduling -------------------------------------------------------------------------------------
    # True / "list": critical-path list scheduling with engine balancing; "ready_time": earliest-emitted
    # ready instruction first (the first list scheduler, for comparison); False / "inorder": program order
    list_schedule: bool | str = True
