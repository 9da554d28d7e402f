"""Golden tests for HLO passes, in the style of IREE's lit tests: HLO text in, HLO text out.

``<case>.in.hlo`` is parsed, the pass runs, and the printed module must equal ``<case>.out.hlo`` exactly; a
pass that records decisions (fusion) must also reproduce ``<case>.decisions.txt``. The output must verify, and
the interpreter must give the same results before and after on random inputs.

Large (``{...}``) constants need no side files: their data is drawn from a generator seeded by the key.
Set ``NEURONC_UPDATE_GOLDEN=1`` to rewrite the expected files from the current output, then review the diff.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from compiler.passes.interface import HloPass
from hlo.ir import FLOAT_DTYPES, Module, numpy_dtype
from hlo.parser import parse_module
from hlo.printer import constant_key, is_elided, print_module

GOLDEN_DIR = Path(__file__).parent
UPDATE = os.environ.get("NEURONC_UPDATE_GOLDEN") == "1"


def random_array(dtype: str, dims: Sequence[int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype in FLOAT_DTYPES:
        return rng.standard_normal(dims).astype(numpy_dtype(dtype))
    if dtype == "pred":
        return rng.integers(0, 2, dims).astype(np.bool_)
    return rng.integers(-4, 5, dims).astype(numpy_dtype(dtype))


def parse_with_constants(text: str) -> Module:
    """Parse HLO text, inventing deterministic data for every ``{...}`` constant."""
    skeleton = parse_module(text)
    constants = {constant_key(i): random_array(i.shape.dtype, i.shape.dims, zlib.crc32(constant_key(i).encode()))
                 for i in skeleton.all_instructions() if is_elided(i)}
    return parse_module(text, constants=constants)


def random_args(module: Module, seed: int = 0) -> list[np.ndarray]:
    return [random_array(p.shape.dtype, p.shape.dims, seed + i) for i, p in enumerate(module.entry.parameters)]


def evaluate(module: Module, args: list[np.ndarray]) -> list[np.ndarray]:
    from hlo.interpreter import evaluate as interpret

    arrays = [np.asarray(v) for v in interpret(module, args)]
    return [a.astype(np.float64) if a.dtype.kind in "fV" else a for a in arrays]  # "V": bf16, fp8


def _check_text(path: Path, actual: str) -> None:
    if UPDATE or not path.exists():
        path.write_text(actual)
        if not UPDATE:
            raise AssertionError(f"{path.name} did not exist; wrote it from the current output: review it")
    expected = path.read_text()
    assert actual == expected, f"output differs from {path.name}:\n{actual}"


def run_golden(case: str, passes: Sequence[HloPass], rtol: float = 0.0, atol: float = 0.0,
               check_numerics: bool = True, source: str | None = None) -> Module:
    """Run ``passes`` in order on ``<source or case>.in.hlo``; compare the output with ``<case>.out.hlo`` (and
    ``<case>.decisions.txt``), verify it, and compare interpreter results before and after."""
    from hlo.verifier import verify_module

    text = (GOLDEN_DIR / f"{source or case}.in.hlo").read_text()
    before = parse_with_constants(text)
    verify_module(before)
    after = parse_with_constants(text)
    lines: list[str] = []
    for p in passes:
        p.run(after)
        lines += p.decision_lines() if hasattr(p, "decision_lines") else []
    verify_module(after)
    _check_text(GOLDEN_DIR / f"{case}.out.hlo", print_module(after))
    if lines:
        _check_text(GOLDEN_DIR / f"{case}.decisions.txt", "\n".join(lines) + "\n")
    if check_numerics:
        args = random_args(before)
        for want, got in zip(evaluate(before, args), evaluate(after, args), strict=True):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return after
