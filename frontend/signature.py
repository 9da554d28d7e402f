"""The calling convention of a captured model: how what the torch model takes maps to the program's inputs, and
how the program's outputs are put back into what the model returns.

A model is called with positional and keyword arguments that are pytrees (tensors inside tuples, dicts, cache
objects, ModelOutputs); torch.export flattens ``(args, kwargs)`` into leaves. The tensor leaves are the HLO
entry's parameters, in order; the other leaves (None, ints, bools) were specialized by the capture and must be
passed again with the same values. The outputs are the HLO root's elements, unflattened with the model's output
spec. Element types are HLO's (s64 stays s64 here even where the device keeps it in s32: the executable converts
and range-checks).

Cache objects (transformers' DynamicCache and the other Cache classes) are registered as pytree nodes with
transformers' own exporter functions when transformers is in use (``register_model_pytrees``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from hlo.errors import LoweringError

from .builder import HLO_TO_TORCH


def register_model_pytrees(model: Any) -> None:
    """Make the cache classes a transformers model takes or returns flattenable (as transformers' exporter does).
    Nothing to do when transformers is not imported: then the model is not one of its models."""
    if "transformers" not in sys.modules or not isinstance(model, torch.nn.Module):
        return
    try:
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:  # an older transformers: its executorch helper registers DynamicCache only
        try:
            from transformers.integrations.executorch import register_dynamic_cache_export_support
        except ImportError:
            return
        register_dynamic_cache_export_support()
        return
    register_cache_pytrees_for_model(model)


def leaf_names(tree: Any) -> list[str]:
    """A readable name per leaf of ``(args, kwargs)``: args[0], attention_mask, cache.layers[0].keys, ..."""
    try:
        paths, _ = pytree.tree_flatten_with_path(tree)
    except Exception:  # a node type registered without key functions
        return [f"input {i}" for i in range(len(pytree.tree_leaves(tree)))]
    names = []
    for path, _ in paths:
        text = pytree.keystr(path)
        if text.startswith("[0]"):
            text = "args" + text[3:]
        elif text.startswith("[1]['"):
            text = text[5:].replace("']", "", 1)
        names.append(text)
    return names


@dataclass
class Signature:
    """How to call a compiled model like the torch model: ``flatten`` the arguments into program inputs,
    ``unflatten`` the program outputs into the model's output structure."""

    in_spec: pytree.TreeSpec | None          # of (args, kwargs); None: the program inputs, flat
    fed: list[int]                           # leaf positions that are program inputs, in order
    constants: dict[int, Any]                # the other leaves, as the model was captured with them
    names: list[str]                         # a name per leaf
    out_spec: pytree.TreeSpec | None         # None: a flat list of outputs
    in_types: list[str] = field(default_factory=list)   # HLO element types of the program inputs
    out_types: list[str] = field(default_factory=list)  # and of its outputs

    @classmethod
    def from_example(cls, in_spec: pytree.TreeSpec | None, leaves: list[Any], names: list[str],
                     out_spec: pytree.TreeSpec | None) -> Signature:
        fed = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        constants = {i: leaf for i, leaf in enumerate(leaves) if not isinstance(leaf, torch.Tensor)}
        return cls(in_spec, fed, constants, names, out_spec)

    @classmethod
    def positional(cls, n: int) -> Signature:
        """n positional tensor inputs, outputs as a flat tuple (fx capture, HLO)."""
        return cls(None, list(range(n)), {}, [f"input {i}" for i in range(n)], None)

    @classmethod
    def of_call(cls, args: tuple, kwargs: dict, out_spec: pytree.TreeSpec | None) -> Signature:
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        return cls.from_example(spec, leaves, leaf_names((tuple(args), dict(kwargs))), out_spec)

    def input_names(self) -> list[str]:
        return [self.names[i] if i < len(self.names) else f"input {n}" for n, i in enumerate(self.fed)]

    def flatten(self, args: tuple, kwargs: dict) -> list[Any]:
        """The program inputs (tensors or arrays) of a call ``model(*args, **kwargs)``."""
        if self.in_spec is None:
            if kwargs:
                raise LoweringError(f"this program takes positional inputs only, got keyword arguments "
                                    f"{', '.join(kwargs)}")
            return list(args)
        kwargs = self._ordered(kwargs)
        leaves, spec = pytree.tree_flatten((tuple(args), kwargs))
        if spec != self.in_spec:
            raise LoweringError(f"the arguments do not have the structure the model was compiled with: expected "
                                f"{_brief(self.in_spec)}, got {_brief(spec)}")
        for i, value in self.constants.items():
            if not _same(leaves[i], value):
                raise LoweringError(f"argument {self.names[i]}: the model was compiled with {value!r} here (a "
                                    f"non-tensor argument is fixed at compile time), got {leaves[i]!r}")
        return [leaves[i] for i in self.fed]

    def _ordered(self, kwargs: dict) -> dict:
        """kwargs in the order of the compiled call (a dict's pytree spec depends on its key order)."""
        spec = self.in_spec
        children = spec.children() if spec is not None else []
        if len(children) != 2 or children[1].type is not dict:
            return dict(kwargs)
        keys = list(children[1].context)
        missing = [k for k in keys if k not in kwargs]
        extra = [k for k in kwargs if k not in keys]
        if missing or extra:
            what = [f"missing {', '.join(missing)}"] if missing else []
            what += [f"not compiled with {', '.join(extra)}"] if extra else []
            raise LoweringError(f"keyword arguments do not match the compiled call ({'; '.join(what)}); compile "
                                f"with the keyword arguments the model is called with")
        return {k: kwargs[k] for k in keys}

    def unflatten(self, outputs: list[Any]) -> Any:
        """The model's output structure around the program's outputs."""
        if self.out_spec is None:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return pytree.tree_unflatten(list(outputs), self.out_spec)

    def torch_out_dtypes(self) -> list[torch.dtype | None]:
        return [HLO_TO_TORCH.get(t) for t in self.out_types]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else False
    except Exception:
        return a is b


def _brief(spec: pytree.TreeSpec, limit: int = 200) -> str:
    text = " ".join(str(spec).split())
    return text if len(text) <= limit else text[:limit] + "..."
