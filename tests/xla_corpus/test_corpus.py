"""The XLA conformance corpus at three stages: the interpreter, and the compiled program on the emulator at
every optimization level. No stage may give a wrong number or crash: it matches jax, or it was refused with a
typed error before it ran. ``expected.json`` lists the stages known to match; a stage listed there that no
longer matches is a regression (regenerate it with ``python -m tests.xla_corpus.test_corpus --update``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.errors import NeuroncError
from tests.xla_corpus.corpus import Case, case_names, load_case, mismatch

EXPECTED = Path(__file__).with_name("expected.json")
LEVELS = (0, 1, 2, 3)


def interpret(case: Case) -> str:
    """'ok' or 'refused: ...'; raises AssertionError on a wrong number."""
    from hlo.interpreter import evaluate
    from hlo.parser import parse_module
    from hlo.verifier import verify_module

    try:
        module = parse_module(case.hlo, source=f"{case.name}.hlo")
        verify_module(module)
    except NeuroncError as e:
        return f"refused: {e}"
    with np.errstate(all="ignore"):
        got = evaluate(module, case.inputs)
    why = mismatch(got, case.outputs)
    assert why is None, f"{case.name}: the interpreter gives a WRONG number: {why}"
    return "ok"


def compiled(case: Case, level: int) -> str:
    import compiler

    try:
        exe = compiler.compile(case.hlo, opt_level=level)
    except NeuroncError as e:
        return f"refused: {e}"
    with np.errstate(all="ignore"):
        got = exe.run(*case.inputs)
    why = mismatch(got, case.outputs)
    assert why is None, f"{case.name} -O{level}: the compiled program gives a WRONG number: {why}"
    return "ok"


def statuses(case: Case) -> dict[str, str]:
    result = {"interp": interpret(case)}
    for level in LEVELS:
        result[f"O{level}"] = compiled(case, level)
    return result


def _expected() -> dict[str, list[str]]:
    return json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}


@pytest.mark.parametrize("name", case_names())
def test_case_matches_jax_or_is_refused(name):
    case = load_case(name)
    got = statuses(case)
    regressed = [stage for stage in _expected().get(name, []) if got[stage] != "ok"]
    assert not regressed, f"{name}: {', '.join(f'{s} {got[s]}' for s in regressed)} (was ok)"


def main() -> int:
    if "--update" not in sys.argv:
        print(__doc__)
        return 2
    table = {}
    for name in case_names():
        ok = [stage for stage, status in statuses(load_case(name)).items() if status == "ok"]
        if ok:
            table[name] = ok
    EXPECTED.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{sum(map(len, table.values()))} stages of {len(table)} cases known to match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
