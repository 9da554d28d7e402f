"""The compiled model as users call it: ``Executable``.

``exe(*args, **kwargs)`` takes what the torch model takes (torch tensors or numpy arrays; int64, bool, uint8,
0-d; pytrees such as a cache object or a dict of keyword arguments) and returns what the model returns (tuple,
dict, ModelOutput, cache) as torch tensors of torch's dtypes. ``exe.run(...)`` takes the same arguments (or the
program's flat inputs) and returns a flat list of numpy arrays in those dtypes (pred as bool, s64 as int64).

The device keeps some element types narrower than HLO's: s64 in 32-bit integers, pred in 8-bit ones. An int64
input is range-checked on the way in (an out-of-range value is an InputError naming the input, never a wrap);
results are widened back on the way out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.lazy import lazy_import
from compiler.stats import CompileStats
from hlo.errors import LoweringError
from isa import neff
from isa.dtypes import dtype as isa_dtype
from isa.errors import InputError
from isa.program import Program

if TYPE_CHECKING:
    from frontend.signature import Signature
    from isa.emulator import Emulator, Profile, RunResult

# torch, the emulator and the ISA printer load when a program is first run, called or printed: a cache hit that
# only writes its .neff needs none of them
torch_values = lazy_import("compiler.torch_values")
isa_emulator = lazy_import("isa.emulator")
asm = lazy_import("isa.asm")


# HLO element type -> the numpy dtype torch gives that type (what inputs arrive as and outputs leave as)
HLO_NUMPY: dict[str, Any] = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "s64": np.int64,
                             "s32": np.int32, "s16": np.int16, "s8": np.int8, "u8": np.uint8, "pred": np.bool_}


@dataclass
class Executable:
    """A compiled program plus what is needed to feed it, to call it like the model and to explain it."""

    program: Program
    hlo: str = ""
    pass_timing: str = ""
    reports: dict[str, str] = field(default_factory=dict)
    signature: Signature | None = None
    compile_stats: CompileStats | None = None  # per-phase time and peak memory of the compile (None: loaded)
    # decoded programs by checks level, reused by later runs (isa.emulator.Emulator)
    _emulators: dict[str, tuple[tuple[int, ...], Emulator]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def asm(self) -> str:
        return asm.print_program(self.program)

    @property
    def target(self) -> str:
        return self.program.target

    def input_specs(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(name, ISA dtype, shape) of every input, in order."""
        return [(n, self.program.tensors[n].dtype, self.program.tensors[n].shape) for n in self.program.inputs]

    def _types(self, key: str) -> list[str]:
        """HLO element types of the inputs or outputs ("" when the program does not record them)."""
        text = self.program.meta.get(key)
        if not isinstance(text, str) or not text:
            return []
        return text.split(",")

    def _input_names(self) -> list[str]:
        specs = self.input_specs()
        if self.signature is not None and len(self.signature.fed) == len(specs):
            return self.signature.input_names()
        return [n for n, _, _ in specs]

    def _flat_inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        """The program inputs of a call: through the model's signature, or the flat inputs themselves."""
        n = len(self.program.inputs)
        flat_call = not kwargs and all(_is_array(a) for a in args)  # the program's own inputs (checked by _bind)
        if self.signature is None or self.signature.in_spec is None:
            if kwargs:
                raise InputError(f"this program takes {n} positional input(s), got keyword arguments "
                                 f"{', '.join(kwargs)}")
            return list(args)
        try:
            return self.signature.flatten(args, kwargs)
        except LoweringError as e:
            if flat_call and len(args) == n:
                return list(args)
            names = ", ".join(f"{a}: {d}{list(s)}" for a, (_, d, s) in zip(self._input_names(), self.input_specs()))
            raise InputError(f"{e} (the program takes {n} input(s): {names})") from None

    def _bind(self, inputs: Sequence[Any], labels: list[str] | None = None) -> dict[str, np.ndarray]:
        """The program's inputs by name, checked and converted (``labels``: how errors name them; the model's
        argument names by default)."""
        specs = self.input_specs()
        if len(inputs) != len(specs):
            raise InputError(f"the program takes {len(specs)} input(s) "
                             f"({', '.join(f'{n}: {d}{list(s)}' for n, d, s in specs)}), got {len(inputs)}")
        names = labels or self._input_names()
        bound = {}
        for (name, dt, shape), label, value in zip(specs, names, inputs, strict=True):
            array = to_numpy(value)
            if tuple(array.shape) != tuple(shape):
                raise InputError(f"input {label}: expected shape {list(shape)}, got {list(array.shape)}")
            bound[name] = _to_device(array, isa_dtype(dt).numpy, dt, label)
        return bound

    def emulator(self, checks: str = "rules") -> Emulator:
        """The program decoded for the emulator at ``checks`` level (off, rules, full), kept for later
        runs: the first run schedules it, later ones replay its numerics (same results, bit for bit).
        Decoded again when ``program`` was replaced or its instruction list changed length."""
        stamp = (id(self.program), id(self.program.instructions), len(self.program.instructions),
                 id(self.program.constants))
        kept = self._emulators.get(checks)
        if kept is None or kept[0] != stamp:
            kept = self._emulators[checks] = (stamp, isa_emulator.Emulator(self.program, checks=checks))
        return kept[1]

    def _execute(self, args: tuple, kwargs: dict, check: bool, progress: bool, checks: str | None = None
                 ) -> RunResult:
        feeds = self._bind(self._flat_inputs(args, kwargs))
        return self.emulator(isa_emulator.checks_level(check, checks)).run(feeds, progress=progress)

    def _outputs(self, result: RunResult) -> list[np.ndarray]:
        """The results in the dtypes torch gives them (pred as bool, s64 as int64)."""
        types = self._types("output_types")
        outs = [result.outputs[name] for name in self.program.outputs]
        if len(types) != len(outs):
            return outs
        return [_from_device(a, t) for a, t in zip(outs, types, strict=True)]

    def run(self, *args: Any, check: bool = False, progress: bool = False, checks: str | None = None,
            **kwargs: Any) -> list[np.ndarray]:
        """Run on the emulator: the model's arguments (or the program's flat inputs) in, the outputs in order
        as numpy arrays out. ``checks``: off, rules or full (see ``isa.emulator.run_program``; ``check=True`` is
        full)."""
        return self._outputs(self._execute(args, kwargs, check, progress, checks))

    def run_program_inputs(self, inputs: Sequence[np.ndarray], *, check: bool = False, progress: bool = False,
                           checks: str | None = None) -> tuple[list[np.ndarray], Profile]:
        """One emulation on the program's own inputs, in its order (``input_specs``): the outputs as ``run`` gives
        them and the profile. Neither the model's calling convention nor torch is needed (`neuronc run`)."""
        feeds = self._bind(inputs, [name for name, _, _ in self.input_specs()])
        result = self.emulator(isa_emulator.checks_level(check, checks)).run(feeds, progress=progress)
        return self._outputs(result), result.profile

    def run_with_profile(self, *args: Any, **kwargs: Any) -> tuple[list[np.ndarray], Any]:
        """One emulation: (the outputs as ``run`` gives them, the profile as ``profile`` gives it)."""
        result = self._execute(args, kwargs, False, False)
        return self._outputs(result), result.profile

    def profile(self, *args: Any, check: bool = False, progress: bool = False, checks: str | None = None,
                **kwargs: Any) -> Profile:
        """Run with timing; returns the emulator's Profile."""
        return self._execute(args, kwargs, check, progress, checks).profile

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Drop-in for the model: its arguments in, its output structure out, as torch tensors."""
        outs = [torch_values.result_to_torch(a, t) for a, t in zip(self.run(*args, **kwargs),
                                                 self._types("output_types") or [""] * len(self.program.outputs),
                                                 strict=True)]
        if self.signature is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return self.signature.unflatten(outs)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs drawn from N(0, 1) (integers from 0..9) with the program's shapes and dtypes."""
        rng = np.random.default_rng(seed)
        result = []
        for _, dt, shape in self.input_specs():
            d = isa_dtype(dt)
            values = rng.standard_normal(shape) if d.is_float else rng.integers(0, 10, shape)
            result.append(values.astype(d.numpy))
        return result

    def summary(self) -> tuple[str, int, int, int]:
        """(target, instructions, inputs, outputs) of the program."""
        return (self.program.target, len(self.program.instructions), len(self.program.inputs),
                len(self.program.outputs))

    def save_meta(self) -> dict[str, str | None]:
        """What ``save`` records in the program's meta: the HLO text and the calling convention (None: none)."""
        return {"hlo": self.hlo, "signature": signature_to_json(self.signature)}

    def save(self, path: str | os.PathLike, *, weights: str = "auto") -> None:
        """Write the .neff container (atomically); ``weights``: auto, inline or external (a safetensors
        side file beside it, see isa.neff.save)."""
        for key, value in self.save_meta().items():
            if value is None:
                self.program.meta.pop(key, None)
            else:
                self.program.meta[key] = value
        if self.compile_stats is not None:
            with self.compile_stats.phase(".neff write", "output"):
                neff.save(self.program, os.fspath(path), weights=weights)
        else:
            neff.save(self.program, os.fspath(path), weights=weights)


def signature_to_json(signature: Signature | None) -> str | None:
    """The calling convention as JSON (kept in a saved .neff and a compile cache entry; no pickle), or None
    when there is none or it holds something JSON cannot (compiler.torch_values)."""
    return None if signature is None else torch_values.signature_to_json(signature)


def signature_from_json(text: str) -> Signature | None:
    """The Signature that ``signature_to_json`` wrote; None (with a log line) when it cannot be rebuilt here."""
    return torch_values.signature_from_json(text)


def _is_tensor(value: Any) -> bool:
    """A torch tensor (there is none unless torch was imported, so this never imports it)."""
    return "torch" in sys.modules and torch_values.is_tensor(value)


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray | np.generic | int | float | bool) or _is_tensor(value)


def _to_device(array: np.ndarray, want: Any, dt: str, label: str) -> np.ndarray:
    """``array`` in the program's input dtype: the same, or an integer/bool narrowed after a range check."""
    if array.dtype == want:
        return array
    if array.dtype == np.bool_ and np.issubdtype(want, np.integer):
        return array.astype(want)
    if np.issubdtype(array.dtype, np.integer) and np.issubdtype(want, np.integer):
        info = np.iinfo(want)
        if array.size:
            lo, hi = int(array.min()), int(array.max())
            if lo < info.min or hi > info.max:
                raise InputError(f"input {label}: values from {lo} to {hi} do not fit the device's {dt} "
                                 f"({info.min}..{info.max}); the device keeps this {array.dtype} input in {dt}")
        return array.astype(want)
    raise InputError(f"input {label}: expected dtype {dt} ({np.dtype(want)}), got {array.dtype}")


def _from_device(array: np.ndarray, hlo_type: str) -> np.ndarray:
    want = HLO_NUMPY.get(hlo_type)
    if want is None or array.dtype == want:
        return array
    return array.astype(want)


def to_numpy(value: Any) -> np.ndarray:
    """A torch tensor or array-like as a numpy array (bf16 tensors keep their dtype)."""
    if _is_tensor(value):
        return torch_values.tensor_to_numpy(value)
    return np.asarray(value)


class LoadedExecutable(Executable):
    """The Executable of a saved .neff: its calling convention (the JSON in the program's meta) is rebuilt when
    first asked for, since rebuilding it imports torch (its pytree specs), which running the program on its own
    inputs never needs (`neuronc run` and `profile` of a torch model's .neff: ~1.3 s of torch import less)."""

    def __init__(self, program: Program, signature_json: str | None, **fields: Any) -> None:
        super().__init__(program=program, **fields)
        self._signature_json = signature_json

    @property  # type: ignore[override]
    def signature(self) -> Signature | None:
        if self._signature_json is not None:
            self._signature, self._signature_json = signature_from_json(self._signature_json), None
        return self._signature

    @signature.setter
    def signature(self, value: Signature | None) -> None:
        self._signature, self._signature_json = value, None
