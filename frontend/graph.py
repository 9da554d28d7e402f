"""What capture hands to lowering: the captured graph, and a node resolved to an ATen overload."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx


@dataclass
class CapturedGraph:
    """An fx graph ready for lowering."""

    name: str
    graph: fx.Graph
    inputs: list[fx.Node]                                   # user-input placeholders, in order
    constants: dict[fx.Node, tuple[str, torch.Tensor]]      # node -> (state_dict name, tensor)
    outputs: list[Any]                                      # fx Nodes (flattened user outputs)
    kind: str                                               # "export" or "fx"
    root: torch.nn.Module | None = None                     # fx: owner of call_module targets
    signature: Any = None                                   # export: the calling convention (signature.py)


class Call:
    """A graph node resolved to an ATen overload name and its (unbound) arguments."""

    def __init__(self, op: str, args: Sequence[Any], kwargs: dict[str, Any] | None = None):
        self.op, self.args, self.kwargs = op, tuple(args), dict(kwargs or {})
