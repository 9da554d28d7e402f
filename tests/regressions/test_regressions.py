"""Every .hlo reproducer in this folder (saved by benchmarks/fuzz.py, or written by hand) must compile at
-O0..-O3 for trn1 and trn2, run in checked mode and match the references (tests/fuzz/harness.py).

A reproducer of a bug that is still open is listed in KNOWN_BUGS with the bug it shows; it is expected to
fail (strict xfail), so the suite stays green and the entry must be removed when the bug is fixed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.hlo.io import load_hlo_file
from tests.fuzz.harness import run_case

HERE = Path(__file__).resolve().parent

# reproducer file -> the open bug it shows (owner: file, function: symptom)
KNOWN_BUGS: dict[str, str] = {
    "reduce_max_chunk_overflows_tile.hlo":
        "backend (issue 6/7): backend/kernels/elementwise.py _Kernel.tiles: a chunk of a row reduction holds "
        "every inner free axis whole, larger than the fw_max-element tiles it is loaded into; the load overruns "
        "its SBUF slot and clobbers the running max (result misses the first chunk)",
    "fusion_broadcast_of_computed_value.hlo":
        "fusion pass (issue 4) + backend (issue 6/7): compiler/passes/fusion.py fuses negate -> broadcast -> tanh "
        "into one kLoop fusion that backend/fused.py ExprBuilder.axes_for cannot lower (CompilationError 'cannot "
        "place a [2, 3] value in a kernel over [4, 2, 3]' at -O2/-O3)",
    "gelu_of_constant_at_O0.hlo":
        "backend (issue 6/7): backend/kernels/evaluate.py TileEvaluator._fold: the _FOLD table has no gelu or "
        "gelu_tanh, so gelu of a constant is refused at -O0 ('cannot fold gelu of immediates')",
    "iota_in_chunked_reduction.hlo":
        "backend (issue 6/7): backend/kernels/evaluate.py TileEvaluator._iota_free_strides asserts "
        "self.coords is not None, but the chunked row kernel's dry run (backend/kernels/elementwise.py "
        "_RowKernel._measure) evaluates with coords=None: a masked (iota) sum over a long row crashes at -O2/-O3",
}

FILES = sorted(HERE.glob("*.hlo"))


def _case(path: Path):
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[path.name])] if path.name in KNOWN_BUGS else []
    return pytest.param(path, marks=marks, id=path.name)


@pytest.mark.parametrize("path", [_case(p) for p in FILES])
def test_reproducer(path):
    result = run_case(load_hlo_file(path))
    assert result.ok, result.report()
    assert not result.unsupported, result.unsupported[0]


def test_known_bugs_name_existing_files():
    names = {p.name for p in FILES}
    assert set(KNOWN_BUGS) <= names, sorted(set(KNOWN_BUGS) - names)
