"""One fuzz case: compile an HLO module at every configuration, run it in checked mode, compare.

Each configuration (``-O0..-O3`` x ``trn1, trn2``) compiles a fresh parse of the module's text (the passes
rewrite modules in place) with ``verify_each``; configurations whose optimized HLO is identical to one
already run share its result. Outputs of the emulator, the reference interpreter and eager torch are each
compared with the float64 reference and its error bound (reference.py). What goes wrong is a ``Failure``:

  unsupported  CompilationError/UnsupportedOpError for a program that uses an op class the backend does not
               support yet (not a bug; counted apart)
  rejected     the same errors for a program of supported classes only
  crash        any other exception while compiling (names the raising project function)
  checked      an ISA error while running: race, uninitialized read, rule violation, deadlock
  mismatch     an emulator output outside the bound
  interpreter  the reference interpreter raised or is outside the bound
  torch        eager torch is outside the bound (a bug of reference.py, or torch semantics differ)
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from compiler.errors import CompilationError, UnsupportedOpError
from hlo.ir import Module, numpy_dtype
from hlo.parser import parse_module
from hlo.printer import print_module
from isa.errors import IsaError
from tests.fuzz.reference import UNIT_ROUNDOFF, Bounded, NotModeled, check, exact_outputs, torch_outputs

TARGETS = ("trn1", "trn2")
# the op class of each opcode the generator emits (the others are layout helpers: tuple, constant...)
OPCODE_CLASSES = {"reduce": "reduce", "dot": "dot", "transpose": "transpose", "reshape": "reshape",
                  "slice": "slice", "concatenate": "concatenate", "convert": "convert", "broadcast": "broadcast",
                  "compare": "select", "select": "select", "clamp": "select", "iota": "select", "pad": "pad"}
_NAMED_OPCODE = re.compile(r"%[\w.\-]+ \(([\w\-]+)\)")
SUPPORTED_CLASSES = frozenset({"elementwise", "broadcast", "reduce", "dot", "batch_dot", "transpose", "reshape",
                               "slice", "concatenate", "convert", "select", "pad"})
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, order=True)
class Config:
    opt_level: int
    target: str
    scheduler: str = "list"
    auto_cast: str = "none"

    def __str__(self) -> str:
        extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in (("scheduler", self.scheduler),
                                                                      ("auto_cast", self.auto_cast))
                        if v != getattr(Config, k))
        return f"-O{self.opt_level} {self.target}{extra}"


ALL_CONFIGS = tuple(Config(o, t) for t in TARGETS for o in range(4))
# more of the compiler, for campaigns: program-order scheduling and mixed precision
EXTRA_CONFIGS = (Config(2, "trn1", scheduler="inorder"), Config(0, "trn2", scheduler="inorder"),
                 Config(2, "trn1", auto_cast="matmult"), Config(3, "trn2", auto_cast="all"))


@dataclass(frozen=True)
class Failure:
    kind: str
    detail: str  # the exception type (and where it was raised), or which output
    message: str
    config: Config | None = None

    @property
    def signature(self) -> str:
        """kind, detail and message with numbers and instruction names blanked: one bug, one signature."""
        text = re.sub(r"%[\w.\-]+", "%_", f"{self.kind}: {self.detail}: {self.message}")
        text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
        return text[:240]

    def __str__(self) -> str:
        where = f" at {self.config}" if self.config else ""
        return f"{self.kind}{where}: {self.detail}: {self.message}"


@dataclass
class CaseResult:
    hlo: str
    failures: list[Failure] = field(default_factory=list)
    unsupported: list[Failure] = field(default_factory=list)
    runs: int = 0  # emulator runs (configurations with distinct optimized HLO)

    @property
    def ok(self) -> bool:
        return not self.failures

    def signatures(self) -> set[str]:
        return {f.signature for f in self.failures}

    def failing_configs(self, signature: str) -> list[Config]:
        return sorted({f.config for f in self.failures if f.signature == signature and f.config})

    def report(self) -> str:
        lines = [str(f) for f in self.failures] or ["ok"]
        return "\n".join(lines) + "\n--- program ---\n" + self.hlo


def random_inputs(module: Module, seed: int = 0) -> list[np.ndarray]:
    """N(0, 1) inputs in each entry parameter's dtype."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(numpy_dtype(p.shape.dtype))
            for p in module.entry.parameters]


def _origin(exc: BaseException) -> str:
    """'Type in pkg/file.py:function' for the innermost frame of project code (not tests/, not libraries)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = Path(frame.filename).resolve()
        if ROOT in path.parents and "tests" not in path.relative_to(ROOT).parts[:1]:
            return f"{type(exc).__name__} in {path.relative_to(ROOT).as_posix()}:{frame.name}"
    return type(exc).__name__


def _output_dtypes(module: Module) -> list[str]:
    root = module.entry.root
    return [s.dtype for s in (root.shape.tuple_shapes if root.shape.is_tuple else (root.shape,))]


def _compare(result: CaseResult, kind: str, who: str, outputs: Sequence[np.ndarray], exact: list,
             dtypes: list[str], config: Config | None = None) -> None:
    if len(outputs) != len(exact):
        result.failures.append(Failure(kind, who, f"{len(outputs)} outputs, expected {len(exact)}", config))
        return
    for j, (got, want, dtype) in enumerate(zip(outputs, exact, dtypes)):
        problem = check(np.asarray(got), want, dtype)
        if problem:
            result.failures.append(Failure(kind, f"{who} output {j}", problem, config))


def _references(result: CaseResult, module: Module, inputs: list[np.ndarray]) -> list[Bounded] | None:
    """The float64 reference (the interpreter's results, with a few roundings of slack, for a module the
    references do not model), after checking the interpreter and torch against it."""
    from hlo.interpreter import evaluate

    dtypes = _output_dtypes(module)
    try:
        exact = exact_outputs(module, inputs)
    except NotModeled:
        exact = None
    try:
        interp = evaluate(parse_module(result.hlo), inputs)
    except Exception as e:  # noqa: BLE001 - any exception of the interpreter is a finding
        result.failures.append(Failure("interpreter", _origin(e), str(e)))
        interp = None
    if exact is None:
        if interp is None:
            return None
        return [_slack(np.asarray(v, np.float64), d) for v, d in zip(interp, dtypes)]
    if interp is not None:
        _compare(result, "interpreter", "interpreter", interp, exact, dtypes)
    try:
        _compare(result, "torch", "torch", torch_outputs(module, inputs), exact, dtypes)
    except NotModeled:
        pass
    return exact


def _slack(value: np.ndarray, dtype: str) -> Bounded:
    v = torch.from_numpy(value.copy())
    return Bounded(v, 4 * UNIT_ROUNDOFF.get(dtype, 2.0 ** -8) * v.abs())


def _is_unsupported(message: str, classes: frozenset[str] | None) -> bool:
    """A compile error is "unsupported" when the program uses an op class the backend lacks and the error does
    not name an instruction of a supported class."""
    if classes is None or classes <= SUPPORTED_CLASSES:
        return False
    named = _NAMED_OPCODE.search(message)
    opcode_class = OPCODE_CLASSES.get(named.group(1), "elementwise") if named else None
    return opcode_class is None or named.group(1) == "fusion" or opcode_class not in SUPPORTED_CLASSES


def run_case(module: Module | str, configs: Iterable[Config] = ALL_CONFIGS, classes: frozenset[str] | None = None,
             inputs: list[np.ndarray] | None = None) -> CaseResult:
    """Compile and run ``module`` at every configuration; ``classes`` are the op classes it uses (to tell an
    unsupported class from a rejected program)."""
    from compiler import driver

    text = module if isinstance(module, str) else print_module(module)
    reference_module = parse_module(text)
    result = CaseResult(text)
    inputs = inputs if inputs is not None else random_inputs(reference_module)
    exact = {"none": _references(result, reference_module, inputs)}
    dtypes = _output_dtypes(reference_module)
    seen: set[tuple[str, ...]] = set()
    for config in configs:
        try:
            exe = driver.compile(parse_module(text), target=config.target, opt_level=config.opt_level,
                                 verify_each=True, scheduler=config.scheduler, auto_cast=config.auto_cast)
        except (CompilationError, UnsupportedOpError) as e:
            unsupported = _is_unsupported(str(e), classes)
            failure = Failure("unsupported" if unsupported else "rejected", type(e).__name__, str(e), config)
            (result.unsupported if unsupported else result.failures).append(failure)
            continue
        except Exception as e:  # noqa: BLE001 - anything else is a crash of the compiler
            result.failures.append(Failure("crash", _origin(e), str(e), config))
            continue
        key = (config.target, config.scheduler, exe.hlo)
        if key in seen:
            continue
        seen.add(key)
        result.runs += 1
        try:
            outputs = exe.run(*inputs, check=True)
        except IsaError as e:
            result.failures.append(Failure("checked", _origin(e), str(e), config))
            continue
        except Exception as e:  # noqa: BLE001
            result.failures.append(Failure("crash", _origin(e), str(e), config))
            continue
        if config.auto_cast not in exact:
            try:
                exact[config.auto_cast] = exact_outputs(reference_module, inputs, config.auto_cast)
            except NotModeled:
                exact[config.auto_cast] = None
        if exact[config.auto_cast] is not None:
            _compare(result, "mismatch", "emulator", outputs, exact[config.auto_cast], dtypes, config)
    return result
