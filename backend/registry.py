"""Registries of the backend's pluggable strategies: schedulers, tile policies and memory planners.

Each strategy is chosen by name (`--scheduler`, `--tile-policy`, `--memory-planner`, or the same keywords
of `compiler.compile`). The built-in ones register here or in the module that implements them
(schedule.py registers its schedulers); a user's plug-in file registers more (docs/plugins.md):

    from backend.registry import register_scheduler

    @register_scheduler("mine", description="program order, but DMAs first")
    def mine(problem):                  # backend.schedule.ScheduleProblem
        placer = problem.placer()
        ...                              # placer.commit(i) for every instruction, in a topological order
        return placer.placement

The interfaces:
- scheduler: `place(problem: ScheduleProblem) -> Placement` (backend/schedule.py), plus whether PE may
  reorder its stationary groups (`reorders_pe_groups`: the dependencies then leave PE's stationary tile
  chain out and the scheduler must keep each group together; see schedule._PeGroups).
- tile policy: `(shape: KernelShape, options: BackendOptions) -> BackendOptions`, called once per dot or
  convolution kernel; it returns the options that kernel is tiled with (moving_tile, group_banks,
  max_stationary_blocks, stationary_buffers, moving_buffers, output_buffers, ...). The result is checked
  against TILE_FIELDS' bounds, so a policy cannot ask for an impossible tiling in silence.
- memory planner: `(survey: Survey, tensors: dict[name, (dtype, elements)], sbuf_partition_bytes: int,
  partitions: int, excluded: frozenset[str]) -> list[Image]`: which tensors between kernels stay in SBUF
  (residency.plan_residency is the built-in); the backend lowers again without a tensor whose image the
  kernels cannot honour (excluded grows), so a planner only proposes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from importlib import import_module
from typing import Any, Generic, TypeVar

from backend.options import BackendOptions
from backend.residency import Image, Survey, plan_residency
from hlo.errors import CompilationError, NeuroncError

T = TypeVar("T")


class StrategyError(NeuroncError):
    """An unknown strategy name, a name registered twice, or a plug-in strategy that misbehaved."""


class Registry(Generic[T]):
    """Named strategies of one kind; names are unique (a plug-in cannot silently replace a built-in)."""

    def __init__(self, kind: str, option: str, builtins: tuple[str, tuple[str, ...]] | None = None):
        self.kind = kind  # "scheduler", "tile policy", ...
        self.option = option  # the compile option that names one: "scheduler", "tile_policy", ...
        self._entries: dict[str, T] = {}
        self._origin: dict[str, str] = {}
        # (module, names): the module whose import registers the built-in entries of these names, imported on
        # the first lookup of an entry; option parsing names them without importing the backend
        self._builtins = builtins

    def _load_builtins(self) -> None:
        if self._builtins is not None:
            module, self._builtins = self._builtins[0], None
            import_module(module)

    def _pending(self) -> tuple[str, ...]:
        """Names of built-ins not registered yet (their module is not imported)."""
        return () if self._builtins is None else self._builtins[1]

    def register(self, name: str, entry: T, origin: str = "built-in", replace: bool = False) -> T:
        self._load_builtins()
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise StrategyError(f"{self.kind} name {name!r}: use letters, digits, '_' and '-'")
        if name in self._entries and not replace:
            raise StrategyError(f"{self.kind} {name!r} is already registered (by {self._origin[name]}); "
                                f"choose another name")
        self._entries[name] = entry
        self._origin[name] = origin
        return entry

    def get(self, name: str) -> T:
        self._load_builtins()
        try:
            return self._entries[name]
        except KeyError:
            raise StrategyError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())} (a plug-in file "
                                f"passed with --plugin can register more)") from None

    def unregister(self, name: str) -> None:
        self.get(name)
        del self._entries[name], self._origin[name]

    def set_origin(self, name: str, origin: str) -> None:
        self.get(name)
        self._origin[name] = origin

    def origin(self, name: str) -> str:
        self.get(name)
        return self._origin[name]

    def names(self) -> list[str]:
        return [*self._pending(), *self._entries]

    def __contains__(self, name: object) -> bool:
        return name in self._pending() or name in self._entries

    @contextmanager
    def scoped(self) -> Iterator[None]:
        """Registrations made inside are undone at the end (tests)."""
        self._load_builtins()
        entries, origin = dict(self._entries), dict(self._origin)
        try:
            yield
        finally:
            self._entries, self._origin = entries, origin


# -- schedulers ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SchedulerSpec:
    name: str
    place: Callable[[Any], Any]  # (schedule.ScheduleProblem) -> schedule.Placement
    reorders_pe_groups: bool = False
    description: str = ""


SCHEDULER_NAMES = ("list", "ready_time", "inorder")  # the built-ins, registered by backend/schedule.py
SCHEDULERS: Registry[SchedulerSpec] = Registry("scheduler", "scheduler", builtins=("backend.schedule", SCHEDULER_NAMES))


def register_scheduler(name: str, *, reorders_pe_groups: bool = False, description: str = "",
                       origin: str = "plug-in") -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Decorator: register `place(problem) -> Placement` as the scheduler `name`."""
    def wrap(place: Callable[[Any], Any]) -> Callable[[Any], Any]:
        SCHEDULERS.register(name, SchedulerSpec(name, place, reorders_pe_groups, description or _doc(place)), origin)
        return place
    return wrap


# -- tile policies ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelShape:
    """What a tile policy (and the autotuner) sees of a GEMM or convolution kernel.

    dot: dims = (batch, M, K, N) of out[M, N] = lhs[M, K] @ rhs[K, N] (batch: product of batch dims).
    conv: dims = (N, C, H, W, O, KH, KW) of the input [N, C, H, W] and the weights [O, C, KH, KW].
    """

    kind: str
    dims: tuple[int, ...]
    dtype: str  # the PE's compute dtype (bf16, f32, ...)

    @property
    def key(self) -> str:
        return f"{self.kind}:{'x'.join(map(str, self.dims))}:{self.dtype}"


# The options a tile policy may change, with their bounds (inclusive). A policy's result outside them is
# refused with the policy's name, the kernel and the field.
TILE_FIELDS: dict[str, tuple[int, int]] = {
    "moving_tile": (1, 512), "group_banks": (1, 8), "max_stationary_blocks": (1, 16), "psum_acc_banks": (1, 8),
    "psum_transpose_banks": (1, 8),
    "stationary_buffers": (2, 4),  # 1 gives wrong results: dot.py prefetches the next super-block's blocks
    "moving_buffers": (1, 4), "output_buffers": (1, 16),
    "transpose_chunk": (128, 4096), "moving_resident_bytes": (0, 192 * 1024),
}

TilePolicy = Callable[[KernelShape, BackendOptions], BackendOptions]
TILE_POLICIES: Registry[TilePolicy] = Registry("tile policy", "tile_policy")


def register_tile_policy(name: str, origin: str = "plug-in") -> Callable[[TilePolicy], TilePolicy]:
    """Decorator: register `policy(shape, options) -> options` as the tile policy `name`."""
    def wrap(policy: TilePolicy) -> TilePolicy:
        TILE_POLICIES.register(name, policy, origin)
        return policy
    return wrap


def default_tile_policy(shape: KernelShape, options: BackendOptions) -> BackendOptions:
    """The options as given, with the per-shape choices of `options.tile_overrides` (the autotuner's)."""
    for key, choices in options.tile_overrides:
        if key == shape.key:
            return replace(options, **dict(choices))
    return options


TILE_POLICIES.register("default", default_tile_policy)

def kernel_options(shape: KernelShape, options: BackendOptions) -> BackendOptions:
    """The options the kernel of `shape` is tiled with: the chosen tile policy's, checked."""
    policy = TILE_POLICIES.get(options.tile_policy)
    chosen = policy(shape, options)
    if not isinstance(chosen, BackendOptions):
        raise StrategyError(f"tile policy {options.tile_policy!r} returned {type(chosen).__name__} for "
                            f"{shape.key}; it must return a BackendOptions (dataclasses.replace(options, ...))")
    for name, (lo, hi) in TILE_FIELDS.items():
        value = getattr(chosen, name)
        if not isinstance(value, int) or not lo <= value <= hi:
            raise StrategyError(f"tile policy {options.tile_policy!r} chose {name}={value!r} for {shape.key}; "
                                f"allowed: {lo}..{hi}")
    changed = [f.name for f in fields(BackendOptions)
               if getattr(chosen, f.name) != getattr(options, f.name) and f.name not in TILE_FIELDS]
    if changed:
        raise StrategyError(f"tile policy {options.tile_policy!r} changed {changed[0]} for {shape.key}; a tile "
                            f"policy may change only {', '.join(TILE_FIELDS)}")
    return chosen


# -- memory planners -------------------------------------------------------------------------------------------

MemoryPlanner = Callable[[Survey, dict[str, tuple[str, int]], int, int, frozenset[str]], list[Image]]
MEMORY_PLANNERS: Registry[MemoryPlanner] = Registry("memory planner", "memory_planner")


def register_memory_planner(name: str, origin: str = "plug-in") -> Callable[[MemoryPlanner], MemoryPlanner]:
    """Decorator: register `planner(survey, tensors, sbuf_partition_bytes, partitions, excluded) -> images`."""
    def wrap(planner: MemoryPlanner) -> MemoryPlanner:
        MEMORY_PLANNERS.register(name, planner, origin)
        return planner
    return wrap


def _spill_everything(survey: Survey, tensors: dict[str, tuple[str, int]], sbuf_partition_bytes: int,
                      partitions: int, excluded: frozenset[str]) -> list[Image]:
    """Every tensor between kernels goes through HBM."""
    return []


MEMORY_PLANNERS.register("residency", plan_residency)
MEMORY_PLANNERS.register("spill", _spill_everything)


def plan_memory(name: str, survey: Survey, tensors: dict[str, tuple[str, int]], sbuf_partition_bytes: int,
                partitions: int, excluded: frozenset[str]) -> list[Image]:
    """The images the memory planner `name` proposes, checked (known tensors, none excluded)."""
    images = MEMORY_PLANNERS.get(name)(survey, tensors, sbuf_partition_bytes, partitions, excluded)
    if not isinstance(images, list) or not all(isinstance(i, Image) for i in images):
        raise StrategyError(f"memory planner {name!r} must return a list of residency.Image, got "
                            f"{type(images).__name__}")
    for image in images:
        if image.tensor not in tensors or image.tensor in excluded:
            raise CompilationError(f"memory planner {name!r} kept {image.tensor!r} on chip, which is not a "
                                   f"{'tensor between kernels' if image.tensor not in tensors else 'candidate'}")
    return images


def _doc(obj: Any) -> str:
    return ((obj.__doc__ or "").strip().splitlines() or [""])[0]


__all__ = ["KernelShape", "MEMORY_PLANNERS", "Registry", "SCHEDULERS", "SchedulerSpec", "StrategyError",
           "TILE_FIELDS", "TILE_POLICIES", "kernel_options", "plan_memory", "register_memory_planner",
           "register_scheduler", "register_tile_policy"]
