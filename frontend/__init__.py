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

from .capture import capture_export, capture_fx
from .lowering import LOWERINGS, lower_graph, supported_operators

__all__ = ["import_model", "supported_operators"]


def import_model(model: Any, example_inputs: Sequence[Any], *, capture: str = "export",
                 name: str | None = None) -> Module:
    """Capture ``model`` (an nn.Module, or an ExportedProgram for capture="export") and lower it to HLO.

    The entry computation ``main`` takes the tensor inputs as parameters in order; weights, buffers and
    lifted constants are ``constant`` instructions whose ``data`` attribute is the state_dict name.
    Raises UnsupportedOpError listing every operator without a lowering rule, or LoweringError.
    """
    if capture == "export":
        captured = capture_export(model, example_inputs, name, keep=LOWERINGS)
    elif capture == "fx":
        captured = capture_fx(model, example_inputs, name)
    else:
        raise LoweringError(f"capture must be 'export' or 'fx', not {capture!r}")
    return lower_graph(captured)
