"""Early HBM capacity checks of the driver.

A model whose weights, inputs and outputs cannot all sit in the target's HBM (``hbm.capacity_bytes`` of the
target file: 16 GiB per core on trn1, 12 GiB on trn2) is refused before anything allocates them: for a torch
model before the frontend copies its weights, for HLO before the passes run (a ``constant({...})`` without
data is sized by its shape), and for the compiled program (which adds the backend's scratch tensors) before
it is returned. The error names the tensor that cannot be placed at all, or the largest ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hlo.errors import CompilationError
from hlo.ir import Module, Shape
from hlo.printer import format_shape

GIB = 1 << 30


class CapacityError(CompilationError):
    """The model (or one of its tensors) does not fit in the target's HBM."""


@dataclass(frozen=True)
class Tensor:
    what: str  # e.g. "constant %w f32[70000,70000]" or "weight fc.weight float32[4096, 4096]"
    nbytes: int


def hbm_capacity(target: Any) -> int | None:
    """The target's HBM bytes per core, or None when its file does not say."""
    hbm = target.data.get("hbm") if isinstance(getattr(target, "data", None), dict) else None
    capacity = hbm.get("capacity_bytes") if isinstance(hbm, dict) else None
    return int(capacity) if isinstance(capacity, int | float) and capacity > 0 else None


def size_text(nbytes: int) -> str:
    if nbytes >= GIB:
        return f"{nbytes / GIB:.1f} GiB"
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.1f} MiB"
    return f"{nbytes} bytes"


def check_fits(tensors: Sequence[Tensor], target: Any, what: str) -> None:
    """Raise CapacityError when one tensor alone, or all of them together, exceed the target's HBM."""
    capacity = hbm_capacity(target)
    if capacity is None:
        return
    name = getattr(target, "name", "the target")
    for t in tensors:
        if t.nbytes > capacity:
            need, have = _sizes(t.nbytes, capacity)
            raise CapacityError(f"{t.what} alone needs {need}, more than the {have} of HBM of {name}: it cannot "
                                f"be placed or tiled on this target")
    total = sum(t.nbytes for t in tensors)
    if total > capacity:
        largest = sorted(tensors, key=lambda t: -t.nbytes)[:3]
        listing = "; ".join(f"{t.what}: {size_text(t.nbytes)}" for t in largest)
        need, have = _sizes(total, capacity)
        raise CapacityError(f"{what} need {need} of HBM, more than the {have} of {name}; the largest: {listing}")


def _sizes(need: int, have: int) -> tuple[str, str]:
    """Both sizes in words, with exact byte counts when the words would read the same."""
    a, b = size_text(need), size_text(have)
    return (f"{a} ({need} bytes)", f"{b} ({have} bytes)") if a == b else (a, b)


# ---- HLO modules ------------------------------------------------------------------------------------------


def _shape_bytes(shape: Shape) -> int:
    try:
        return shape.nbytes
    except KeyError:  # an element type the IR does not know is the verifier's to report
        return 0


def module_tensors(module: Module) -> list[Tensor]:
    """Entry parameters, every constant, and the entry's outputs (what must live in HBM)."""
    tensors: list[Tensor] = []
    entry = module.entry
    if entry is None:
        return tensors
    for p in entry.parameters:
        tensors.append(Tensor(f"parameter %{p.name} {format_shape(p.shape, with_layout=False)}",
                              _shape_bytes(p.shape)))
    for inst in module.all_instructions():
        if inst.opcode == "constant":
            tensors.append(Tensor(f"constant %{inst.name} {format_shape(inst.shape, with_layout=False)}",
                                  _shape_bytes(inst.shape)))
    root = entry.root
    if root is not None and root.opcode != "parameter":
        outputs = root.operands if root.opcode == "tuple" else [root]
        for out in dict.fromkeys(outputs):
            if out.opcode not in ("parameter", "constant"):
                tensors.append(Tensor(f"output %{out.name} {format_shape(out.shape, with_layout=False)}",
                                      _shape_bytes(out.shape)))
    return tensors


def check_module(module: Module, target: Any) -> None:
    check_fits(module_tensors(module), target, f"the parameters, constants and outputs of module {module.name}")


# ---- torch models -----------------------------------------------------------------------------------------


def _torch_tensors(items: Iterable[tuple[str, Any]], kind: str) -> list[Tensor]:
    import torch

    result = []
    for name, value in items:
        if isinstance(value, torch.Tensor):
            nbytes = value.numel() * value.element_size()  # the logical size: expanded views count in full
            result.append(Tensor(f"{kind} {name} {str(value.dtype).removeprefix('torch.')}{list(value.shape)}",
                                 nbytes))
    return result


def model_tensors(model: Any, example_inputs: Sequence[Any]) -> list[Tensor]:
    """Weights and buffers of an nn.Module or ExportedProgram, and the example inputs."""
    import torch

    tensors: list[Tensor] = []
    if isinstance(model, torch.nn.Module):
        tensors += _torch_tensors(model.named_parameters(), "weight")
        tensors += _torch_tensors(model.named_buffers(), "buffer")
    elif isinstance(model, torch.export.ExportedProgram):
        tensors += _torch_tensors(model.state_dict.items(), "weight")
        tensors += _torch_tensors(getattr(model, "constants", {}).items(), "constant")
    tensors += _torch_tensors(((f"#{i}", x) for i, x in enumerate(example_inputs)), "example input")
    return tensors


def check_model(model: Any, example_inputs: Sequence[Any], target: Any) -> None:
    check_fits(model_tensors(model, example_inputs), target, f"the weights and inputs of {type(model).__name__}")


# ---- compiled programs ------------------------------------------------------------------------------------


def check_program(program: Any, target: Any) -> None:
    """Every HBM tensor of a compiled program (inputs, outputs, constants, the backend's scratch)."""
    tensors = [Tensor(f"{decl.kind} tensor {name} {decl.dtype}{list(decl.shape)}", decl.nbytes)
               for name, decl in program.tensors.items()]
    check_fits(tensors, target, "the HBM tensors of the compiled program")
