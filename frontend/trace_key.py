"""A cheap key for a torch model's capture: what the compile cache looks up before paying torch.export.

``trace_key(model, example_inputs, example_kwargs)`` runs the model's forward once on fake tensors (no
arithmetic) under a ``TorchFunctionMode`` and records every torch call it makes, at the level the
model's Python code makes them (``F.linear``, ``Tensor.view``, ``torch.arange``...): the function's
name, every argument (a tensor by where it came from: an input, an earlier call's result, or a tensor
from outside the trace - a parameter, a buffer, a plain attribute, a global - by its names, metadata
and a hash of its values), the metadata of every result, the module stack and the user-code frames
(file, line) of the call. With the model's class, the (args, kwargs) and output pytree structures,
the non-tensor inputs, the module tree and the torch version, that trace determines what torch.export
produces from the model - the ATen graph, the constants, the names and the source metadata of the HLO -
so equal traces may share a compiled program.

What makes it sound:
- The trace runs the way torch.export's non-strict capture does: eval mode, fake inputs, the parameters
  and buffers replaced by fake tensors, ``torch.compiler.is_compiling()/is_exporting()`` true; so code
  that branches on those takes the path export takes.
- Python values the forward reads from outside (globals, attributes, flags) reach the program only as
  arguments of torch calls, which are recorded with their values, or as tensors, which are hashed.
  Python values computed from tensor metadata are functions of the recorded metadata; values computed
  from tensor data cannot be read from fake tensors (the trace fails).
- Anything it cannot encode makes it give up (``None``: the caller captures and keys on the HLO as
  before): an argument of an unknown type, a tensor subclass, a function outside torch, a custom op
  (``torch.ops`` outside aten/prims, whose Python body the trace does not see), an error in the forward.

Tensor values are hashed with xxHash's XXH3-128 (``tensor_digest``): about 10 GB/s here against SHA-256's
0.5, and a digest of 128 bits makes an accidental collision between two weight sets negligible. It is
not a cryptographic hash: someone able to choose weights that collide with another user's could also
write to a shared cache folder, so it protects against accidents, as the rest of the key does.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
import xxhash
from torch._export.utils import _compiling_state_context
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.nn.utils.stateless import _reparametrize_module
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils import _pytree as pytree

from .capture import eval_mode, model_name, quiet
from .signature import register_model_pytrees

FORMAT = 1  # of the recorded trace; part of the key
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FX_CODE = "<eval_with_key>"  # a GraphModule's generated forward (numbered per process: its nodes' metadata counts)
_OPS_NAMESPACES = ("aten", "prims")  # torch.ops whose behaviour is torch's own (the version is in the key)
_SCALARS = (bool, int, float, complex, str)
_ENUMS = (torch.dtype, torch.device, torch.layout, torch.memory_format)


class Unkeyable(Exception):
    """The trace met something it cannot put in a key (the caller falls back to capturing)."""


def tensor_digest(t: torch.Tensor) -> str:
    """XXH3-128 of a real tensor's dtype, shape and values. Not memoized: a tensor can change without its
    version counter knowing (through ``.data`` or a numpy view), and hashing is cheap (GPT-2: ~0.03 s)."""
    t = t.detach()
    digest = xxhash.xxh3_128(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel() == 0:
        return digest.hexdigest()
    if t.is_contiguous():
        data = t.reshape(-1)
    else:
        # A strided view (expand, transpose, slice) is its strides plus the storage span it reads: hashing
        # that never materialises the view (a 4-byte buffer expanded to 70000x70000 would need 19.6 GB).
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        data = t.as_strided((span,), (1,), t.storage_offset())
        digest.update(f"{t.stride()}".encode())
    digest.update(memoryview(data.view(torch.uint8).numpy()))
    return digest.hexdigest()


def _describe(t: torch.Tensor) -> tuple:
    return (str(t.dtype), tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.requires_grad)


class _Recorder(TorchFunctionMode):
    """Records the torch calls of one forward (see the module docstring)."""

    def __init__(self, names: dict[int, tuple[str, ...]], module_names: dict[int, str], root: Any):
        super().__init__()
        self.names, self.module_names, self.root = names, module_names, root
        self.tensors: dict[int, int] = {}   # id -> number, in order of appearance
        self.alive: list[torch.Tensor] = []  # keeps ids unique while recording
        self.outside: list[tuple] = []       # tensors from outside the trace, in order of first use
        self.constants: list[torch.Tensor] = []  # the real ones among them (not parameters or buffers)
        self.calls: list[tuple] = []
        self.modules: list[str] = []
        self.function_names: dict[Any, str] = {}

    def tensor(self, t: torch.Tensor, produced: bool = False) -> tuple:
        number = self.tensors.get(id(t))
        if number is not None:
            return ("t", number)
        if type(t) not in (torch.Tensor, torch.nn.Parameter, FakeTensor):
            raise Unkeyable(f"a tensor of type {type(t).__qualname__}")
        number = self.tensors[id(t)] = len(self.tensors)
        self.alive.append(t)
        if id(t) in self.names:  # a parameter or buffer (fake during the trace; its real value is hashed)
            self.outside.append(("weight", number, self.names[id(t)]))
        elif not isinstance(t, FakeTensor):  # a plain attribute or a global: its value
            self.outside.append(("constant", number, _describe(t)))
            self.constants.append(t)  # hashed after the trace (outside the fake mode)
        elif produced:  # (under the fake mode every tensor a call makes is fake)
            return ("new", number, _describe(t))
        else:
            raise Unkeyable("a fake tensor from outside the trace")
        return ("t", number)

    def value(self, v: Any, produced: bool = False) -> Any:
        if isinstance(v, torch.Tensor):
            return self.tensor(v, produced)
        kind = type(v)
        if v is None or v is Ellipsis or kind in _SCALARS:
            return (kind.__name__, repr(v))
        if kind in (tuple, list, torch.Size):
            return (kind.__name__, tuple(self.value(x, produced) for x in v))
        if kind is dict:
            return ("dict", tuple((self.value(k), self.value(x, produced)) for k, x in v.items()))
        if kind is slice:
            return ("slice", self.value(v.start), self.value(v.stop), self.value(v.step))
        if kind in _ENUMS:
            return (kind.__name__, str(v))
        raise Unkeyable(f"a value of type {kind.__qualname__}")

    def function(self, func: Any) -> str:
        name = self.function_names.get(func)
        if name is None:
            if isinstance(func, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
                if str(func).split(".")[0] not in _OPS_NAMESPACES:
                    raise Unkeyable(f"the custom operator {func}")
            name = resolve_name(func)
            if not name or not name.startswith(("torch.", "aten.", "prims.")):
                raise Unkeyable(f"the function {func!r} outside torch")
            self.function_names[func] = name
        return name

    def frames(self) -> tuple:
        """(file, line) of each frame of the call that is not torch's, innermost first."""
        out, frame = [], sys._getframe(2)
        while frame is not None and frame.f_code is not _run.__code__:
            path = frame.f_code.co_filename
            if not path.startswith(_TORCH_DIR) and not path.startswith(_FX_CODE):
                out.append((path, frame.f_lineno))
            frame = frame.f_back
        return tuple(out)

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        entry = [self.function(func), self.value(tuple(args)), self.value(kwargs), tuple(self.modules),
                 self.frames()]
        result = func(*args, **kwargs)
        entry.append(self.value(result, produced=True))
        self.calls.append(tuple(entry))
        return result

    def enter_module(self, module: Any, *_: Any) -> None:
        self.modules.append(self.module_names.get(id(module)) or f"<{type(module).__qualname__}>")

    def leave_module(self, *_: Any) -> None:
        if self.modules:
            self.modules.pop()


def _run(recorder: _Recorder, model: Any, args: tuple, kwargs: dict) -> Any:
    with recorder:
        return model(*args, **kwargs)


def trace_key(model: Any, example_inputs: Sequence[Any], example_kwargs: dict[str, Any] | None = None
              ) -> str | None:
    """The hex SHA-256 of the model's recorded trace (see the module docstring), or None when it cannot
    be keyed (the model is not an nn.Module, the forward fails on fake tensors, or the trace meets
    something it cannot encode)."""
    if not isinstance(model, torch.nn.Module) or torch.is_grad_enabled() and _wants_grad(example_inputs):
        return None
    try:
        return _trace_key(model, tuple(example_inputs), dict(example_kwargs or {}))
    except Unkeyable:
        return None
    except Exception:  # the forward failed on fake tensors (data-dependent code...): capture as usual
        return None


def _ambient() -> tuple:
    """The global torch state the capture sees besides the model: grad and inference modes (the trace runs
    in the caller's, as export does), autocast, the default dtype, deterministic algorithms."""
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), str(torch.get_default_dtype()),
            torch.are_deterministic_algorithms_enabled(),
            tuple((device, torch.is_autocast_enabled(device), str(torch.get_autocast_dtype(device)))
                  for device in ("cpu", "cuda")))


def _wants_grad(inputs: Sequence[Any]) -> bool:
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves(list(inputs)))


def _trace_key(model: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    register_model_pytrees(model)
    weights = dict(model.named_parameters(remove_duplicate=False))
    weights.update(model.named_buffers(remove_duplicate=False))
    names: dict[int, list[str]] = {}
    for name, t in weights.items():
        names.setdefault(id(t), []).append(name)
    module_names: dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        module_names.setdefault(id(module), name)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = {name: fake_mode.from_tensor(t, static_shapes=True) for name, t in weights.items()}
    by_fake = {id(fakes[name]): tuple(sorted(names[id(t)])) for name, t in weights.items()}
    real_of_fake = {id(fakes[name]): t for name, t in weights.items()}
    leaves, in_spec = pytree.tree_flatten((args, kwargs))
    fake_leaves = [fake_mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x for x in leaves]
    recorder = _Recorder(by_fake, module_names, model)
    inputs = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if type(x) is not torch.Tensor:
                raise Unkeyable(f"an input of type {type(x).__qualname__}")
            inputs.append(("tensor", _describe(x)))
        else:
            inputs.append(recorder.value(x))
    for x in fake_leaves:
        if isinstance(x, torch.Tensor):
            recorder.tensor(x, produced=True)
    fake_args, fake_kwargs = pytree.tree_unflatten(fake_leaves, in_spec)
    pre = torch.nn.modules.module.register_module_forward_pre_hook(recorder.enter_module)
    post = torch.nn.modules.module.register_module_forward_hook(recorder.leave_module, always_call=True)
    try:
        with quiet(), eval_mode(model), fake_mode, _compiling_state_context(), \
                _reparametrize_module(model, fakes, tie_weights=True, strict=True, stack_weights=True):
            result = _run(recorder, model, fake_args, fake_kwargs)
    finally:
        pre.remove()
        post.remove()
    out_leaves, out_spec = pytree.tree_flatten(result)
    outputs = tuple(recorder.value(x) for x in out_leaves)
    weight_digests = tuple((entry[2], _describe(real_of_fake[id(recorder.alive[entry[1]])]),
                            tensor_digest(real_of_fake[id(recorder.alive[entry[1]])]))
                           for entry in recorder.outside if entry[0] == "weight")
    weight_digests += tuple(tensor_digest(t) for t in recorder.constants)
    head = (FORMAT, torch.__version__, _ambient(), type(model).__module__,
            type(model).__qualname__, model_name(model), str(in_spec), tuple(inputs), str(out_spec), outputs,
            tuple((name, type(m).__module__, type(m).__qualname__)
                  for name, m in model.named_modules(remove_duplicate=False)))
    if isinstance(model, torch.fx.GraphModule):  # the source metadata the fx capture reads from its nodes
        head += tuple((n.name, str(n.target), n.meta.get("stack_trace"), str(n.meta.get("nn_module_stack")))
                      for n in model.graph.nodes)
    digest = hashlib.sha256(repr(head).encode())
    digest.update(repr(recorder.calls).encode())
    digest.update(repr(recorder.outside).encode())
    digest.update(repr(weight_digests).encode())
    return digest.hexdigest()
