"""Capture a PyTorch model as an fx graph: torch.export (core ATen) or torch.fx.symbolic_trace.

Both paths produce a ``CapturedGraph``: the graph, its user-input placeholders in order, the tensors
that become HLO constants (weights, buffers, lifted constants, get_attr tensors) with their
state_dict names, and the output values. Every node carries ``meta["val"]`` (a FakeTensor, a meta
tensor, or a plain Python value for size computations) so the lowering sees shapes and dtypes.

Both capture the model in eval mode (``eval_mode``) without changing the caller's module.
"""

from __future__ import annotations

import contextlib
import operator
import warnings
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

from hlo.errors import LoweringError, UnsupportedOpError

from . import fx_aliases, fx_trace
from .graph import CapturedGraph, describe
from .signature import Signature, leaf_names, register_model_pytrees

aten = torch.ops.aten

# Ops torch's default (core ATen) table would decompose but that we lower whole: each has a lowering
# rule that emits a compact, recognizable HLO pattern (one dot for linear, a max/exp/sum/divide chain
# for softmax, ...) which later fusion can match, instead of torch's generic decomposition
# (permute + addmm, native_layer_norm with extra outputs, expand + bmm + _unsafe_view for matmul).
# More generally every op with a lowering rule stays whole (see decomposition_table).
KEEP_WHOLE = (
    aten.linear.default,
    aten.matmul.default,
    aten.layer_norm.default,
    aten.softmax.int,
    aten.log_softmax.int,
    aten.silu.default,
    aten.scaled_dot_product_attention.default,
)


def decomposition_table(keep: Collection[str] = ()) -> dict:
    """torch's core-ATen decomposition table minus ``KEEP_WHOLE`` and the overloads named in ``keep``.

    The frontend passes every op it has a lowering rule for: an op is decomposed only when there is
    no rule for it. (torch's full table is not used as such: it decomposes ops we lower better, and it
    fails on some HuggingFace models, e.g. a view of a transposed GPT-2 activation.)"""
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    for op in list(table.keys()):
        if str(op) in keep:
            table.pop(op)
    return table


def _lowerable_as_is(ep: ExportedProgram, keep: Collection[str]) -> bool:
    """Every op of the exported graph has a rule (``keep``), so decomposing would keep them all."""
    return all(n.target is operator.getitem or str(n.target) in keep
               for n in ep.graph.nodes if n.op == "call_function")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence what torch 2.13 warns about itself during a capture: the FutureWarning it triggers while
    copying pytree specs (LeafSpec), and export's note that nn.LSTM/nn.GRU set ``_flat_weights``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r".*_flat_weights.*were assigned during export.*",
                                category=UserWarning)
        yield


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Put every submodule in eval mode (dropout off, batch norm on running stats) for the capture and
    restore each one's own training flag afterwards: the caller's model is left as it was."""
    if not isinstance(model, torch.nn.Module):
        yield
        return
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


def model_name(model: Any, default: str = "model") -> str:
    """The model's class name (for an ExportedProgram, the root module class recorded by export)."""
    if isinstance(model, ExportedProgram):
        for node in model.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                _, cls = next(iter(stack.values()))
                cls = cls if isinstance(cls, str) else getattr(cls, "__name__", default)
                return cls.rsplit(".", 1)[-1]
        return default
    return type(model).__name__


def _first_lines(exc: BaseException, n: int = 3) -> str:
    """The first lines of the innermost cause's message (wrappers repeat it with noise)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return "\n".join(lines[:n]) or type(exc).__name__


def capture_export(model: torch.nn.Module | ExportedProgram, example_inputs: Sequence[Any],
                   name: str | None = None, keep: Collection[str] = (),
                   example_kwargs: dict[str, Any] | None = None) -> CapturedGraph:
    """torch.export the model in eval mode (or take an ExportedProgram) and decompose every op that is
    not in ``keep`` (the ops with a lowering rule) with torch's core-ATen table. The model is called as
    ``model(*example_inputs, **example_kwargs)``; cache objects among them (or among the outputs) are
    flattened (signature.register_model_pytrees)."""
    name = name or model_name(model)
    register_model_pytrees(model)
    try:
        with quiet():
            if isinstance(model, ExportedProgram):
                ep = model
            else:
                with eval_mode(model):
                    ep = torch.export.export(model, tuple(example_inputs), dict(example_kwargs or {}) or None)
            if not _lowerable_as_is(ep, keep):  # (a re-trace: skipped when it would change nothing)
                ep = ep.run_decompositions(decomposition_table(keep))
    except Exception as e:  # torch raises many unrelated types here; report its own words
        hint = _DATA_DEPENDENT if "unbacked" in str(e).lower() or "data-dependent" in str(e).lower() else ""
        raise LoweringError(f"torch.export failed for {name}: {_first_lines(e, 2 if hint else 3)}{hint}") from e

    sig = ep.graph_signature
    if any(s.kind == OutputKind.TOKEN for s in sig.output_specs):
        raise UnsupportedOpError(f"{name}: {_effects(ep.graph, keep)}")
    mutations = [s for s in sig.output_specs if s.kind not in (OutputKind.USER_OUTPUT,)]
    if mutations:
        raise LoweringError(f"{name}: the model mutates state in forward "
                            f"({', '.join(str(s.target) for s in mutations)}); this is not supported")
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    inputs: list[fx.Node] = []
    constants: dict[fx.Node, tuple[str, torch.Tensor]] = {}
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            inputs.append(node)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            source = ep.state_dict if spec.target in ep.state_dict else ep.constants
            constants[node] = (spec.target, source[spec.target])
        else:
            raise LoweringError(f"{name}: unsupported exported input kind {spec.kind.name} ({node.name})")
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs = list(output_node.args[0])
    user = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    leaves = [node.meta.get("val") if isinstance(s.arg, TensorArgument) else getattr(s.arg, "value", None)
              for node, s in zip(inputs, user, strict=True)]
    if isinstance(model, ExportedProgram):
        names = [node.name for node in inputs]
    else:
        names = leaf_names((tuple(example_inputs), dict(example_kwargs or {})))
    signature = Signature.from_example(ep.call_spec.in_spec, leaves, names, ep.call_spec.out_spec)
    return CapturedGraph(name, ep.graph, inputs, constants, outputs, "export", signature=signature)


_DATA_DEPENDENT = ("\n(a shape, a slice start or a length computed from tensor data, as in narrow() or a slice "
                   "with a tensor start, or .item(): compiled programs have static shapes and offsets; pass such a "
                   "value as a Python int, or use torch.index_select / torch.gather with the tensor)")


def _effects(graph: fx.Graph, keep: Collection[str]) -> str:
    """What a graph with effect tokens does: torch.export keeps an op with a side effect (such as the error check
    that torch.linalg.inv runs on its result, aten._linalg_check_errors) ordered by a token; the ops around it
    without a lowering rule are named with their source lines."""
    effects = [n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.with_effects]
    checks = sorted({str(n.args[1]) for n in effects if len(n.args) > 1})
    missing = [n for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem
               and n.target is not torch.ops.higher_order.with_effects and str(n.target) not in keep]
    parts = [f"unsupported PyTorch operators: {', '.join(f'{n.target} ({describe(n)})' for n in missing)}"] \
        if missing else []
    parts.append(f"operators with a side effect ({', '.join(checks) or 'effect tokens'}), which the compiler "
                 f"does not support")
    return "; ".join(parts)


def capture_fx(model: torch.nn.Module, example_inputs: Sequence[Any], name: str | None = None) -> CapturedGraph:
    """symbolic_trace the model in eval mode with concrete values (``fx_trace``), recording stack traces."""

    name = name or model_name(model)
    if isinstance(model, ExportedProgram):
        raise LoweringError("capture='fx' needs an nn.Module, not an ExportedProgram")
    try:
        with quiet(), eval_mode(model):
            gm = fx_trace.trace(model, example_inputs, name, is_leaf=fx_aliases.is_leaf_module,
                                inline=fx_aliases.inline_function)
    except Exception as e:
        raise LoweringError(f"torch.fx.symbolic_trace failed for {name}: {_first_lines(e)}") from e
    graph = gm.graph

    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    if len(inputs) != len(example_inputs):
        raise LoweringError(f"{name}: forward takes {len(inputs)} inputs, {len(example_inputs)} given")
    constants = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = attribute(gm, node.target)
            if isinstance(value, torch.Tensor):
                constants[node] = (node.target, value)
    output_node = next(n for n in graph.nodes if n.op == "output")
    outputs: list[Any] = []
    fx.node.map_aggregate(output_node.args[0], outputs.append)
    return CapturedGraph(name, graph, inputs, constants, outputs, "fx", root=gm)


def attribute(module: torch.nn.Module, target: str) -> Any:
    """``module.a.b.c`` for target "a.b.c"."""
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value
