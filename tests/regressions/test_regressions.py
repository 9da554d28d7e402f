"""Every .hlo reproducer in this folder (saved by benchmarks/fuzz.py, or written by hand) must compile at
-O0..-O3 for trn1 and trn2, run in checked mode and match the references (tests/fuzz/harness.py).

A reproducer of a bug that is still open is listed in KNOWN_BUGS with the bug it shows; it is expected to
fail (strict xfail), so the suite stays green and the entry must be removed when the bug is fixed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hlo.io import load_hlo_file
from tests.fuzz.harness import run_case

HERE = Path(__file__).resolve().parent

# reproducer file -> the open bug it shows (owner: file, function: symptom)
KNOWN_BUGS: dict[str, str] = {}

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
