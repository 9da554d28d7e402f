"""torch.fx.symbolic_trace with concrete values: every traced operation also runs on the example inputs.

Plain ``symbolic_trace`` cannot get past a ``len(x)``, an ``if x.dim() == 3`` or a ``torch.finfo(x.dtype)``,
which ordinary models (``nn.TransformerEncoderLayer``, HuggingFace models) are full of. This tracer runs
each operation it records on the example inputs as well, so that

- shape queries (``x.shape``, ``x.size()``, ``x.dim()``, ``x.dtype``...) return plain Python values:
  shapes are static in a compiled program, so size computations fold into constants;
- control flow on such values (``if``, ``len``, iteration, ``range(n)``) follows the path the example
  inputs take; control flow on tensor *data* is still refused (torch's TraceError);
- every node carries ``meta["val"]``: its result as a meta tensor (shape and dtype) or a Python value;
- an in-place method (``y.masked_fill_(m, v)``) or an item assignment (``y[:, 0] = v``) is recorded as
  itself and the caller's proxy is rebound to its result, so later uses of ``y`` see the new value
  (fx_aliases lowers the method as its out-of-place op, ops_update the assignment); refused on an
  input, a weight or a view, whose mutation would have to reach another tensor. Augmented
  assignments (``y += 1``) rebind the name only, as plain fx does.

A GraphModule (a TorchDynamo graph) is replayed node by node so that the nodes keep its stack traces.

Modules with a direct lowering (``fx_aliases.MODULES``: nn.Linear, nn.Conv2d...) stay ``call_module``
leaves; every other module, torch.nn ones included (nn.MultiheadAttention...), is traced through.
"""

from __future__ import annotations

import functools
import inspect
import operator
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import fx, nn
from torch.fx.proxy import TraceError

# Tensor attributes and methods that only describe the tensor: evaluated, never recorded.
_DESCRIPTIVE = frozenset({
    "shape", "dtype", "device", "ndim", "layout", "is_nested", "is_cuda", "is_sparse", "is_quantized",
    "is_meta", "is_mkldnn", "is_cpu", "is_xpu", "is_mps", "requires_grad", "size", "dim", "numel", "nelement",
    "stride", "is_floating_point", "is_complex", "is_contiguous", "element_size", "get_device", "ndimension",
    "new_tensor",  # a constant of x's dtype: depends on x's type only
})
# torch functions that only describe their tensor argument: evaluated, never recorded.
_DESCRIPTIVE_FUNCTIONS = frozenset({torch.is_floating_point, torch.is_complex, torch.numel})


def is_inplace_method(name: str) -> bool:
    """``x.add_(y)``-style in-place tensor methods (not dunders such as ``__iadd__``)."""
    return name.endswith("_") and not name.startswith("__")


def _as_meta(value: Any) -> Any:
    return fx.node.map_aggregate(
        value, lambda v: torch.empty_like(v, device="meta") if isinstance(v, torch.Tensor) else v)


class ConcreteProxy(fx.Proxy):
    """A Proxy whose tracer knows the value it stands for on the example inputs."""

    tracer: ConcreteTracer

    @property
    def value(self) -> Any:
        return self.tracer.values[self.node]

    def __getattr__(self, name: str) -> Any:
        value = self.tracer.values.get(self.node)
        if isinstance(value, torch.Tensor) and name in _DESCRIPTIVE:
            return getattr(value, name)
        if value is not None and not hasattr(value, name):
            # as the real value would: hasattr(x, "jax") in transformers' jax-tracing probe must be False
            raise AttributeError(f"{type(value).__name__!r} object has no attribute {name!r}")
        return super().__getattr__(name)

    @classmethod
    def __torch_function__(cls, orig_method: Callable[..., Any], types_: tuple[type, ...],
                           args: tuple[Any, ...] | None = None, kwargs: dict[str, Any] | None = None) -> Any:
        args, kwargs = args or (), kwargs or {}
        tracers = {p.tracer for p in _proxies(args, kwargs)}
        name = getattr(orig_method, "__name__", "")
        if (name == "__setitem__" or is_inplace_method(name)) and args and not isinstance(args[0], fx.Proxy):
            raise TraceError(f"{name} writes traced values into a tensor made from constants, which stays a "
                             "constant: make it from an input instead (x.new_zeros(...), torch.zeros_like(x))")
        if len(tracers) == 1:
            tracer = next(iter(tracers))
            if isinstance(tracer, ConcreteTracer) and orig_method in _DESCRIPTIVE_FUNCTIONS:
                return orig_method(*fx.node.map_aggregate(
                    args, lambda v: tracer.values[v.node] if isinstance(v, fx.Proxy) else v), **kwargs)
            if isinstance(tracer, ConcreteTracer) and tracer.inline(orig_method):
                return _without_dispatch(orig_method)(*args, **kwargs)
        return super().__torch_function__(orig_method, types_, args, kwargs)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``x[key] = value``: recorded as operator.setitem, and x rebound to the updated tensor."""
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})

    def __len__(self) -> int:
        return len(self.value)

    def __index__(self) -> int:
        if isinstance(self.value, torch.Tensor):
            raise TraceError(f"%{self.node.name} is a tensor; using its data as an index is data-dependent")
        return int(self.value)


def _proxies(args: Any, kwargs: Any) -> list[fx.Proxy]:
    found: list[fx.Proxy] = []
    torch.utils._pytree.tree_map_(lambda v: found.append(v) if isinstance(v, fx.Proxy) else None, (args, kwargs))
    return found


def _false(*args: Any) -> bool:
    return False


@functools.cache
def _without_dispatch(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` with its own ``__torch_function__`` check turned off, so that tracing goes into its body."""
    scope = {**fn.__globals__, "has_torch_function": _false, "has_torch_function_unary": _false,
             "has_torch_function_variadic": _false}
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


class ConcreteTracer(fx.Tracer):
    """A ``fx.Tracer`` that executes what it records (see the module docstring)."""

    def __init__(self, example_inputs: Sequence[Any], is_leaf: Callable[[nn.Module], bool],
                 inline: Callable[[Any], bool]):
        super().__init__()
        self.inline = inline  # functions (torch.nn.functional composites) to trace into, not record
        self.record_stack_traces = True
        self.values: dict[fx.Node, Any] = {}
        self._examples = list(example_inputs)
        self._n_placeholders = 0
        self._is_leaf = is_leaf
        self._executing = False

    # ---- tracing hooks -----------------------------------------------------------------------------
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return self._is_leaf(m)

    def create_args_for_root(self, root_fn: Callable[..., Any], is_module: bool,
                             concrete_args: Any = None) -> tuple[Callable[..., Any], list[Any]]:
        """One placeholder per example input, passed positionally; other arguments keep their defaults
        (fx's own version makes a placeholder for every parameter of the unwrapped forward)."""
        params = list(inspect.signature(root_fn).parameters.values())[1 if is_module else 0:]
        names = []
        for i in range(len(self._examples)):
            if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
                names.append(params[i].name)
            elif any(p.kind == p.VAR_POSITIONAL for p in params):
                names.append(f"input_{i}")
            else:
                raise TraceError(f"forward takes {i} positional inputs, {len(self._examples)} given")
        placeholders = [self.create_proxy("placeholder", name, (), {}) for name in names]
        return root_fn, ([self.root] if is_module else []) + placeholders

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
        if self._executing:  # running a leaf module eagerly: its submodule calls are not recorded
            return forward(*args, **kwargs)
        try:
            self.path_of_module(m)
        except NameError:  # a module made inside forward (nn.Upsample(...)(x)): trace into it
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        if self._executing:  # eager execution reads the parameters themselves
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return ConcreteProxy(node, self)

    def create_proxy(self, kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     name: str | None = None, type_expr: Any | None = None,
                     proxy_factory_fn: Callable[[fx.Node], fx.Proxy] | None = None) -> fx.Proxy:
        inplace = ((kind == "call_method" and is_inplace_method(target)) or target is operator.setitem) and \
            isinstance(args[0], ConcreteProxy)
        if inplace:
            self._check_mutable(args[0], getattr(target, "__name__", target))
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        value = self._execute(kind, target, proxy.node)
        if target is operator.setitem:  # setitem returns None; the node stands for the updated tensor
            value = self.values[args[0].node]
        self.values[proxy.node] = value
        proxy.node.meta["val"] = _as_meta(value)
        if inplace:  # from now on the mutated tensor is the result: rebind the caller's proxy to it, and
            args[0].node = proxy.node  # return that proxy, as torch returns the tensor itself
            return args[0]
        return proxy

    def _check_mutable(self, target: ConcreteProxy, method: str) -> None:
        """An in-place method is traced as its out-of-place op whose result replaces the tensor; that is
        only right for a tensor the forward made itself, not a view of another or an input or weight."""
        node, value = target.node, self.values[target.node]
        if node.op in ("placeholder", "get_attr"):
            raise TraceError(f"in-place {method} on {'input' if node.op == 'placeholder' else 'weight'} "
                             f"%{node.name} is not supported")
        if isinstance(value, torch.Tensor) and value._is_view():
            raise TraceError(f"in-place {method} on %{node.name}, a view of another tensor, is not supported")

    def to_bool(self, obj: fx.Proxy) -> bool:
        value = self.values[obj.node]
        if isinstance(value, torch.Tensor):
            raise TraceError(f"control flow depends on the data of tensor %{obj.node.name}")
        return bool(value)

    def iter(self, obj: fx.Proxy) -> Iterator:
        return iter([obj[i] for i in range(len(self.values[obj.node]))])

    def keys(self, obj: fx.Proxy) -> Any:
        return self.values[obj.node].keys()

    # ---- execution ---------------------------------------------------------------------------------
    def _execute(self, kind: str, target: Any, node: fx.Node) -> Any:
        if kind == "placeholder":
            i = self._n_placeholders
            self._n_placeholders += 1
            example = self._examples[i]
            return example.clone() if isinstance(example, torch.Tensor) else example
        if kind == "get_attr":
            return self._attribute(target)
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), self._value_of)
        self._executing = True
        try:
            with torch.no_grad():
                if kind == "call_function":
                    return target(*args, **kwargs)
                if kind == "call_method":
                    return getattr(args[0], target)(*args[1:], **kwargs)
                if kind == "call_module":
                    return self.root.get_submodule(target)(*args, **kwargs)
        finally:
            self._executing = False
        return None

    def _attribute(self, target: str) -> Any:
        self._executing = True
        try:
            value: Any = self.root
            for part in target.split("."):
                value = getattr(value, part)
            return value
        finally:
            self._executing = False

    def _value_of(self, node: fx.Node) -> Any:
        if node not in self.values and node.op == "get_attr":  # tensor constants fx adds by itself
            self.values[node] = self._attribute(node.target)
            node.meta["val"] = _as_meta(self.values[node])
        return self.values[node]


class _Replay(nn.Module):
    """A GraphModule (e.g. a TorchDynamo graph) run node by node, so that each node recorded while it
    runs inherits the stack trace of the node it comes from (the user's source line)."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__()
        object.__setattr__(self, "_graph_module", gm)  # not a submodule: attribute paths stay gm's own
        self._modules, self._parameters, self._buffers = gm._modules, gm._parameters, gm._buffers
        self.__dict__.update({k: v for k, v in gm.__dict__.items() if isinstance(v, torch.Tensor)})

    def forward(self, *args: Any) -> Any:
        with fx.traceback.preserve_node_meta():
            return fx.Interpreter(self._graph_module).run(*args)


def trace(model: nn.Module, example_inputs: Sequence[Any], name: str, *,
          is_leaf: Callable[[nn.Module], bool], inline: Callable[[Any], bool]) -> fx.GraphModule:
    """Trace ``model`` on ``example_inputs``; the graph's placeholders are those inputs, in order.

    ``is_leaf(module)``: record the module as one ``call_module`` node; ``inline(fn)``: trace into a
    Python function that would otherwise be recorded whole through ``__torch_function__``."""
    tracer = ConcreteTracer(example_inputs, is_leaf, inline)
    graph = tracer.trace(_Replay(model) if isinstance(model, fx.GraphModule) else model)
    for node in list(graph.nodes):  # parameters a forward only inspected (x.weight.dtype...)
        if node.op == "get_attr" and not node.users:
            graph.erase_node(node)
    return fx.GraphModule(tracer.root, graph, name)
