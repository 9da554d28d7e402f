"""What capture hands to lowering: the captured graph, and a node resolved to an ATen overload."""

from __future__ import annotations

import os
import re
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


# ---- source locations ---------------------------------------------------------------------------
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)  # frontend/


def source_location(node: fx.Node) -> tuple[str, int] | None:
    """The innermost frame of the node's stack trace that is user code (not torch, not us)."""
    trace = node.meta.get("stack_trace") or ""
    frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(trace)]
    user = [f for f in frames if not f[0].startswith(_SKIP_DIRS)]
    return user[-1] if user else None


def _short(path: str) -> str:
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def describe(node: fx.Node) -> str:
    """``node %name at file.py:12`` (without the location when torch does not know it)."""
    loc = source_location(node)
    return f"node %{node.name}" + (f" at {_short(loc[0])}:{loc[1]}" if loc else "")
