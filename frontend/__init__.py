"""PyTorch -> HLO: capture a model (torch.export or torch.fx) and lower its ATen ops, one rule per op.

    module = frontend.import_model(model, (x,))              # torch.export + our decomposition table
    module = frontend.import_model(model, (x,), capture="fx") # torch.fx tracing with concrete values
    frontend.supported_operators()                            # the ATen overloads with a rule

``torch.compile(model, backend="neuronc")`` lives a layer up, in compiler.dynamo: it compiles and runs.

The model is captured in eval mode; its own training flags are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlo.errors import LoweringError
from hlo.ir import Module

from .builder import shares_torch_memory
from .capture import capture_export, capture_fx
from .lowering import LOWERINGS, lower_graph, supported_operators
from .signature import Signature
from .trace_key import trace_key

__all__ = ["Signature", "import_model", "import_model_with_signature", "shares_torch_memory", "supported_operators",
           "trace_key"]


def import_model(model: Any, example_inputs: Sequence[Any], *, capture: str = "export",
                 name: str | None = None, example_kwargs: dict[str, Any] | None = None) -> Module:
    """Capture ``model`` (an nn.Module, or an ExportedProgram for capture="export") and lower it to HLO.

    The entry computation ``main`` takes the tensor inputs as parameters in order; weights, buffers and
    lifted constants are ``constant`` instructions whose ``data`` attribute is the state_dict name.
    Raises UnsupportedOpError listing every operator without a lowering rule, or LoweringError.
    """
    return import_model_with_signature(model, example_inputs, capture=capture, name=name,
                                       example_kwargs=example_kwargs)[0]


def import_model_with_signature(model: Any, example_inputs: Sequence[Any], *, capture: str = "export",
                                name: str | None = None,
                                example_kwargs: dict[str, Any] | None = None) -> tuple[Module, Signature]:
    """``import_model`` and the model's calling convention: how ``model(*args, **kwargs)`` maps to the HLO
    parameters and the HLO results to what the model returns (frontend.signature)."""
    if capture == "export":
        captured = capture_export(model, example_inputs, name, keep=LOWERINGS, example_kwargs=example_kwargs)
    elif capture == "fx":
        if example_kwargs:
            raise LoweringError("capture='fx' takes positional example inputs only; use capture='export' for "
                                "keyword arguments")
        captured = capture_fx(model, example_inputs, name)
    else:
        raise LoweringError(f"capture must be 'export' or 'fx', not {capture!r}")
    module = lower_graph(captured)
    signature = captured.signature or Signature.positional(len(captured.inputs))
    entry = module.entry
    signature.in_types = [p.shape.dtype for p in entry.parameters]
    root = entry.root.shape
    signature.out_types = [s.dtype for s in (root.tuple_shapes if root.is_tuple else (root,))]
    if len(entry.parameters) != len(signature.fed):
        signature.fed = [signature.fed[i] for i in _used_inputs(captured, entry)]
    return module, signature


def _used_inputs(captured: Any, entry: Any) -> list[int]:
    """Positions (among the tensor inputs) of the inputs that are still HLO parameters (unused ones are dropped):
    parameter numbers were given in input order."""
    return sorted(p.parameter_number for p in entry.parameters)
