"""``torch.compile(model, backend="neuronc")``: compile each graph TorchDynamo captures, run it on the emulator.

The backend is registered through the ``torch_dynamo_backends`` entry point (pyproject.toml), so
``import compiler`` does not have to import torch._dynamo. Dynamo calls ``neuronc_backend(gm, example_inputs)``
once per partial graph (graph breaks split a model into several, and run the Python between them
eagerly). Each graph is captured with the fx path, compiled with ``compiler.compile`` and replaced by a
callable that feeds its inputs to the emulator and returns torch tensors. Module parameters and buffers,
which dynamo passes as graph inputs, are compiled in as constants (as ``frontend.import_model`` does),
and checked by identity and version at each call (see ``CompiledGraph``).

A graph is left to eager PyTorch, with a warning saying why, when it uses operators without a
lowering rule (the warning names them and the source lines), when the compiler or its backend cannot
handle it yet, or when autograd needs it (compiled graphs are for inference: run under
``torch.no_grad()``). Symbolic sizes are specialized per call (see ``CompiledGraph``).

Options: ``torch.compile(model, backend="neuronc", options={"target": "trn2", "opt_level": 1})`` passes
them on to ``compiler.compile``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from compiler.cache_entries import trace_lookup, trace_store
from compiler.driver import compile as compile_model
from compiler.driver import load_target
from compiler.executable import Executable
from compiler.options import CompileOptions, make_options
from compiler.stats import CompileStats, Progress
from compiler.torch_values import to_torch
from frontend.builder import HLO_TO_TORCH
from frontend.capture import attribute, capture_fx
from frontend.lowering import lower_graph
from frontend.trace_key import trace_key
from hlo.errors import NeuroncError

# How often dynamo handed neuronc a graph, how many programs were compiled for them (one per specialization:
# a new input shape or changed weights compiles again) and how many ran eagerly instead. See compile_stats().
STATS = {"graphs": 0, "compiles": 0, "eager": 0}


def compile_stats(reset: bool = False) -> dict[str, int]:
    """{"graphs", "compiles", "eager"} since the last reset: recompilations = compiles - graphs."""
    stats = dict(STATS)
    if reset:
        STATS.update(dict.fromkeys(STATS, 0))
    return stats


class NeuroncFallbackWarning(UserWarning):
    """A graph captured by torch.compile runs eagerly instead of on neuronc."""


def _eager(gm: fx.GraphModule, why: str) -> Callable[..., Any]:
    STATS["eager"] += 1
    warnings.warn(f"neuronc: running a torch.compile graph ({_op_count(gm)} ops) eagerly: {why}",
                  NeuroncFallbackWarning, stacklevel=3)
    return gm.forward


def _op_count(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


class _Run:
    """One compiled specialization: the non-weight tensor inputs go to the emulator, results come back
    as torch tensors. Holds the weights it was compiled with, so that their ids stay theirs."""

    def __init__(self, executable: Any, fed: Sequence[int], out_spec: pytree.TreeSpec,
                 out_dtypes: Sequence[torch.dtype], weights: Sequence[torch.Tensor]):
        self.executable, self.fed, self.out_spec = executable, list(fed), out_spec
        self.out_dtypes, self.weights = list(out_dtypes), list(weights)

    def __call__(self, *inputs: Any) -> Any:
        # the executable converts to the program's types (s64 range-checked into i32, bool into i8)
        outputs = self.executable.run(*[inputs[i].detach().contiguous() for i in self.fed])
        tensors = [to_torch(a, d) for a, d in zip(outputs, self.out_dtypes)]
        return pytree.tree_unflatten(tensors, self.out_spec)


_WEIGHT_SOURCE = re.compile(r"\._(?:parameters|buffers)\[")
_SOURCE_PATH = re.compile(r"\._(?:modules|parameters|buffers)\['([^']+)'\]")


def weight_inputs(gm: fx.GraphModule) -> dict[int, str]:
    """The graph inputs that are module parameters or buffers (dynamo passes them as inputs), by input
    position, with their state_dict names (read from dynamo's source, e.g. L['self']._modules['fc']
    ._parameters['weight'] -> fc.weight)."""
    weights = {}
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", "")
        name = name() if callable(name) else str(name)
        if _WEIGHT_SOURCE.search(name):
            weights[i] = ".".join(_SOURCE_PATH.findall(name))
    return weights


def _frozen(gm: fx.GraphModule, weights: dict[int, str], inputs: Sequence[Any]) -> fx.GraphModule:
    """A copy of ``gm`` whose weight inputs are attributes holding their current values (so they
    become HLO constants named by their state_dict keys, and constant folding sees them)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    attrs: dict[str, Any] = {}
    for node in list(graph.nodes):
        if node.op in ("get_attr", "call_module"):
            attrs[node.target] = attribute(gm, node.target)
    for i, node in enumerate([n for n in graph.nodes if n.op == "placeholder"]):
        if i in weights:
            key = weights[i] or node.name
            attrs[key] = inputs[i].detach()
            with graph.inserting_before(node):
                value = graph.get_attr(key)
            value.meta = dict(node.meta)
            node.replace_all_uses_with(value)
            graph.erase_node(node)
    return fx.GraphModule(attrs, graph)


def _version(t: torch.Tensor) -> int:
    """The tensor's version counter. An inference tensor (made under torch.inference_mode) has none: such
    weights are checked by identity only, so an update in place of one goes unnoticed."""
    return -1 if t.is_inference() else t._version


def _signature(inputs: Sequence[Any], weights: dict[int, str]) -> tuple:
    """What a compiled specialization depends on: the shapes and dtypes of the tensor inputs, the values
    of the others, and the identity and version of each weight (an update in place bumps the version)."""
    return tuple((id(t), _version(t)) if i in weights else
                 (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs))


class CompiledGraph:
    """A dynamo graph compiled once per input signature: shapes are static in a compiled program, so a
    graph with symbolic sizes (``dynamic=True`` or dynamo's automatic dynamic shapes) is specialized to
    the sizes of each call; module weights are compiled in as constants, and a weight that changed (a new
    tensor, or the same one updated in place) compiles the graph again. A specialization neuronc cannot
    compile runs eagerly (with a warning)."""

    def __init__(self, gm: fx.GraphModule, options: dict[str, Any]):
        self.gm, self.options = gm, options
        self.weights = weight_inputs(gm)
        # named by its code, not by a counter, so that the same graph has the same HLO (and cache key) in every
        # process whatever else was compiled before it
        self.name = f"dynamo_graph_{hashlib.sha256(gm.code.encode()).hexdigest()[:8]}"
        self.specializations: dict[tuple, Callable[..., Any]] = {}

    def __call__(self, *inputs: Any) -> Any:
        key = _signature(inputs, self.weights)
        run = self.specializations.get(key)
        if run is None:
            run = self.specializations[key] = self.specialize(inputs)
        return run(*inputs)

    def specialize(self, inputs: Sequence[Any]) -> Callable[..., Any]:
        """Compile for these inputs, or return the eager graph (after a warning saying why)."""
        fed = [i for i, t in enumerate(inputs) if i not in self.weights and isinstance(t, torch.Tensor)]
        rest = [t for i, t in enumerate(inputs) if i not in self.weights]
        try:
            frozen = _frozen(self.gm, self.weights, inputs)
            executable = self.cached(frozen, rest)
            if not isinstance(executable, Executable):
                lookup, module = executable, lower_graph(capture_fx(frozen, rest, name=self.name))
        except NeuroncError as e:
            return _eager(self.gm, str(e))
        if not isinstance(executable, Executable):
            try:
                STATS["compiles"] += 1
                executable = compile_model(module, **self.options)
            except NeuroncError as e:
                return _eager(self.gm, f"the compiler cannot handle it yet: {e}")
            except Exception as e:  # a compiler bug: keep the user's model running, but say so
                return _eager(self.gm, f"internal compiler error (please report it): {type(e).__name__}: {e}")
            if lookup is not None:
                trace_store(lookup, executable)
        else:
            STATS["compiles"] += 1
        output = next(n for n in self.gm.graph.nodes if n.op == "output")
        _, out_spec = pytree.tree_flatten(output.args[0])
        types = [t for t in str(executable.program.meta.get("output_types", "")).split(",") if t]
        return _Run(executable, fed, out_spec, [HLO_TO_TORCH[t] for t in types], [inputs[i] for i in self.weights])

    def cached(self, frozen: fx.GraphModule, rest: Sequence[Any]) -> Any:
        """The program of this graph from the compile cache, looked up by its trace (frontend.trace_key: the
        fx capture and the lowering are skipped on a hit), else what ``trace_store`` needs (or None)."""
        options = make_options(**self.options)
        return trace_lookup(lambda: trace_key(frozen, rest), f"fx {self.name}", options,
                            load_target(options.target), CompileStats(progress=Progress(enabled=False)))


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
    STATS["graphs"] += 1
    if all(isinstance(t, torch.Tensor | bool | int | float) for t in example_inputs):
        first = graph.specialize(example_inputs)  # compile now: a graph that falls back costs nothing
        if first is gm.forward:
            return first
        graph.specializations[_signature(example_inputs, graph.weights)] = first
    return graph


def _checked(options: dict[str, Any] | None) -> dict[str, Any]:
    """The options for compiler.compile; a misspelt one is an error, not a silent fallback."""
    known = {f.name for f in dataclasses.fields(CompileOptions)} - {"capture"}
    unknown = sorted(set(options or {}) - known)
    if unknown:
        raise NeuroncError(f"unknown neuronc option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return dict(options or {})

