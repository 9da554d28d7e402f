"""``torch.compile(model, backend="neuronc")``: compile each graph TorchDynamo captures, run it on the emulator.

The backend is registered through the ``torch_dynamo_backends`` entry point (pyproject.toml), so
``import frontend`` does not have to import torch._dynamo. Dynamo calls ``neuronc_backend(gm, example_inputs)``
once per partial graph (graph breaks split a model into several, and run the Python between them
eagerly). Each graph is captured with the fx path, compiled with ``compiler.compile`` and replaced by a
callable that feeds its inputs (module parameters included: dynamo passes them as graph inputs) to the
emulator and returns torch tensors.

A graph is left to eager PyTorch, with a warning saying why, when it uses operators without a
lowering rule (the warning names them and the source lines), when the compiler or its backend cannot
handle it yet, or when autograd needs it (compiled graphs are for inference: run under
``torch.no_grad()``). Symbolic sizes are specialized per call (see ``CompiledGraph``).

Options: ``torch.compile(model, backend="neuronc", options={"target": "trn2", "opt_level": 1})`` passes
them on to ``compiler.compile``.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import fx
from torch.utils import _pytree as pytree

from compiler.errors import NeuroncError

from .builder import HLO_TO_TORCH
from .capture import capture_fx
from .lowering import lower_graph

_graph_ids = itertools.count()


class NeuroncFallbackWarning(UserWarning):
    """A graph captured by torch.compile runs eagerly instead of on neuronc."""


def _eager(gm: fx.GraphModule, why: str) -> Callable[..., Any]:
    warnings.warn(f"neuronc: running graph {gm.__class__.__name__} ({_op_count(gm)} ops) eagerly: {why}",
                  NeuroncFallbackWarning, stacklevel=3)
    return gm.forward


def _op_count(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def _to_torch(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A numpy result as a torch tensor of ``dtype`` (bf16/fp8 arrive as ml_dtypes arrays)."""
    array = np.ascontiguousarray(array)
    if dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        ints = {torch.bfloat16: np.int16}.get(dtype, np.uint8)
        return torch.from_numpy(array.view(ints).copy()).view(dtype)
    return torch.from_numpy(array.copy())


class _Run:
    """One compiled specialization: the tensor inputs go to the emulator, results come back as torch."""

    def __init__(self, executable: Any, out_spec: pytree.TreeSpec, out_dtypes: Sequence[torch.dtype]):
        self.executable, self.out_spec, self.out_dtypes = executable, out_spec, list(out_dtypes)

    def __call__(self, *inputs: Any) -> Any:
        tensors = [t.detach().contiguous() for t in inputs if isinstance(t, torch.Tensor)]
        outputs = self.executable.run(*tensors)
        return pytree.tree_unflatten([_to_torch(a, d) for a, d in zip(outputs, self.out_dtypes)], self.out_spec)


def _signature(inputs: Sequence[Any]) -> tuple:
    """What a compiled specialization depends on: tensor shapes and dtypes, and the values of the rest."""
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in inputs)


class CompiledGraph:
    """A dynamo graph compiled once per input signature: shapes are static in a compiled program, so a
    graph with symbolic sizes (``dynamic=True`` or dynamo's automatic dynamic shapes) is specialized to
    the sizes of each call. A specialization neuronc cannot compile runs eagerly (with a warning)."""

    def __init__(self, gm: fx.GraphModule, options: dict[str, Any]):
        self.gm, self.options = gm, options
        self.name = f"dynamo_graph_{next(_graph_ids)}"
        self.specializations: dict[tuple, Callable[..., Any]] = {}

    def __call__(self, *inputs: Any) -> Any:
        key = _signature(inputs)
        run = self.specializations.get(key)
        if run is None:
            run = self.specializations[key] = self.specialize(inputs)
        return run(*inputs)

    def specialize(self, inputs: Sequence[Any]) -> Callable[..., Any]:
        """Compile for these inputs, or return the eager graph (after a warning saying why)."""
        try:
            module = lower_graph(capture_fx(self.gm, inputs, name=self.name))
        except NeuroncError as e:
            return _eager(self.gm, str(e))
        from compiler import compile as compile_model  # the driver imports the frontend, not the other way

        try:
            executable = compile_model(module, **self.options)
        except NeuroncError as e:
            return _eager(self.gm, f"the compiler cannot handle it yet: {e}")
        except Exception as e:  # a compiler bug: keep the user's model running, but say so
            return _eager(self.gm, f"internal compiler error (please report it): {type(e).__name__}: {e}")
        output = next(n for n in self.gm.graph.nodes if n.op == "output")
        _, out_spec = pytree.tree_flatten(output.args[0])
        return _Run(executable, out_spec, [HLO_TO_TORCH[s.dtype] for s in _output_shapes(module)])


def neuronc_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *,
                    options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The TorchDynamo backend (see the module docstring)."""
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return _eager(gm, "autograd needs it (compiled graphs are for inference: run under torch.no_grad())")
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = pytree.tree_leaves(output.args[0])
    if not all(isinstance(v, fx.Node) and isinstance(v.meta.get("example_value"), torch.Tensor) for v in leaves):
        return _eager(gm, "it returns values that are not tensors")
    graph = CompiledGraph(gm, _checked(options))
    if all(isinstance(t, torch.Tensor | bool | int | float) for t in example_inputs):
        first = graph.specialize(example_inputs)  # compile now: a graph that falls back costs nothing
        if first is gm.forward:
            return first
        graph.specializations[_signature(example_inputs)] = first
    return graph


def _checked(options: dict[str, Any] | None) -> dict[str, Any]:
    """The options for compiler.compile; a misspelt one is an error, not a silent fallback."""
    import dataclasses

    from compiler.driver import CompileOptions

    known = {f.name for f in dataclasses.fields(CompileOptions)} - {"capture"}
    unknown = sorted(set(options or {}) - known)
    if unknown:
        raise NeuroncError(f"unknown neuronc option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return dict(options or {})


def _output_shapes(module: Any) -> list[Any]:
    root = module.entry.root
    return list(root.shape.tuple_shapes) if root.shape.is_tuple else [root.shape]
