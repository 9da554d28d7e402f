"""The emulator's fast paths give the results of the full one, bit for bit: checks off, rules and
full; a decoded program run again (replayed); against fingerprints stored before these paths
existed (tests/isa/emulator_fingerprint.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from isa.emulator import CHECKS, Emulator, run_program
from isa.errors import InputError, RuleViolation
from isa.neff import load
from tests.isa.emulator_fingerprint import DATA, FINGERPRINTS, MODELS, fingerprint, inputs
from tests.isa.emulator_helpers import ins, program, sb

STORED = json.loads(FINGERPRINTS.read_text())


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("checks", CHECKS)
def test_checks_levels_match_stored_behaviour(name, checks):
    prog = load(DATA / f"{name}.neff")
    result = run_program(prog, inputs(prog), checks=checks)
    assert fingerprint(result.outputs, result.profile) == STORED[name]


@pytest.mark.parametrize("name", list(MODELS))
def test_replayed_runs_match_stored_behaviour(name):
    prog = load(DATA / f"{name}.neff")
    emulator = Emulator(prog, checks="off")
    other = inputs(prog, seed=5)
    first = emulator.run(other)  # scheduled; then replays with other data in between
    for _ in range(2):
        again = emulator.run(inputs(prog))
        assert fingerprint(again.outputs, again.profile) == STORED[name]
    last = emulator.run(other)
    for key in first.outputs:
        np.testing.assert_array_equal(first.outputs[key], last.outputs[key])


def test_constants_are_not_copied_and_stay_intact():
    prog = load(DATA / "mlp.neff")
    emulator = Emulator(prog)
    name = next(n for n, d in prog.tensors.items() if d.kind == "const")
    before = np.array(prog.constants[name], copy=True)
    assert np.shares_memory(emulator.memory.hbm[name], prog.constants[name])
    emulator.run(inputs(prog))
    np.testing.assert_array_equal(prog.constants[name], before)


def _bad_partition_program():
    # 40 partitions starting at partition 32 break the start-partition rule (0 or 64 for 33-64)
    return program([], [ins("dve", "memset", dst=sb(32, 72, 0, [[1, 8]]), value=1.0)])


def test_checks_off_skips_the_machine_rules_and_rules_keeps_them():
    prog = _bad_partition_program()
    with pytest.raises(RuleViolation):
        run_program(prog, {})
    run_program(prog, {}, checks="off")


def test_checks_level_is_validated():
    prog = load(DATA / "mlp.neff")
    with pytest.raises(InputError, match="checks must be one of"):
        run_program(prog, inputs(prog), checks="some")
    with pytest.raises(InputError, match="check=True"):
        run_program(prog, inputs(prog), check=True, checks="off")
