"""The per-opcode fuzzer (tests/fuzz/opcodes.py): every opcode of the IR's table has a generator whose modules
parse, verify and run on the interpreter; a sample compiles and matches in CI, every opcode in the slow run."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hlo.interpreter import evaluate
from hlo.parser import parse_module
from hlo.shape_inference import RULES
from hlo.verifier import verify_module
from tests.fuzz.opcodes import GENERATORS, OPCODES, mismatch, opcode_case, run_opcode_case

# opcodes of other helpers' areas whose fuzz cases still fail (a typed refusal is fine; these are wrong or
# crash): opcode -> why. The slow test skips them; benchmarks/fuzz.py --per-opcode reports them.
KNOWN_FAILURES: dict[str, str] = {}


def test_every_opcode_has_a_generator():
    assert set(OPCODES) == set(RULES)
    assert set(GENERATORS) >= set(RULES), sorted(set(RULES) - set(GENERATORS))


@pytest.mark.parametrize("opcode", OPCODES)
def test_generated_modules_verify_and_interpret(opcode):
    for i in range(3):
        case = opcode_case(opcode, random.Random(f"ci:{opcode}:{i}"))
        module = parse_module(case.text)
        verify_module(module)
        with np.errstate(all="ignore"):
            evaluate(module, case.inputs)
        assert opcode in {inst.opcode for comp in module.computations for inst in comp.instructions}, case.text


@pytest.mark.parametrize("opcode", ["sort", "topk", "reduce-window", "reduce", "compare", "convert"])
def test_a_sample_of_opcodes_compiles_and_matches(opcode):
    case = opcode_case(opcode, random.Random(f"ci:{opcode}:0"))
    for level, (outcome, detail) in run_opcode_case(case, levels=(2,)).items():
        assert outcome in ("ok", "refused"), f"-O{level} {outcome}: {detail}\n{case.text}"


@pytest.mark.slow
@pytest.mark.parametrize("opcode", [op for op in OPCODES if op not in KNOWN_FAILURES])
def test_every_opcode_is_exact_or_refused(opcode):
    for i in range(3):
        case = opcode_case(opcode, random.Random(f"slow:{opcode}:{i}"))
        for level, (outcome, detail) in run_opcode_case(case).items():
            assert outcome in ("ok", "refused"), f"case {i} -O{level} {outcome}: {detail}\n{case.text}"


def test_mismatch_compares_integers_exactly_and_floats_within_tolerance():
    assert mismatch([np.array([1, 2], np.int32)], [np.array([1, 2], np.int32)]) is None
    assert mismatch([np.array([1, 3], np.int32)], [np.array([1, 2], np.int32)]) is not None
    assert mismatch([np.array([1.0, np.nan], np.float32)], [np.array([1.00001, np.nan], np.float32)]) is None
    assert mismatch([np.array([1.0, 0.0], np.float32)], [np.array([1.0, np.nan], np.float32)]) is not None
    assert mismatch([np.array([1.5], np.float32)], [np.array([1.0], np.float32)]) is not None
