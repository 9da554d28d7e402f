"""The differential fuzzer in CI: a fixed-seed hypothesis budget over the op classes that compile, plus tests
of the fuzzer's own parts (generator switches, replay, reference bounds, shrinker, reproducer files)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo.parser import parse_module
from hlo.printer import print_module
from tests.fuzz.choices import HypothesisChooser, RandomChooser, ReplayChooser
from tests.fuzz.generate import OP_CLASSES, GenConfig, generate
from tests.fuzz.harness import ALL_CONFIGS, SUPPORTED_CLASSES, random_inputs, run_case
from tests.fuzz.minimize import drop_unused_parameters, save_reproducer, shrink
from tests.fuzz.reference import check, exact_outputs, torch_outputs

# Small shapes (a tail to 96) so that a few hundred cases x 8 configurations fit the CI budget (< 60 s).
CI_CONFIG = GenConfig(classes=tuple(c for c in OP_CLASSES if c in SUPPORTED_CLASSES), max_ops=6, max_dim=96,
                      max_elements=1 << 12, max_macs=1 << 17)
CI_EXAMPLES = 250


@settings(max_examples=CI_EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_differential(data):
    """Every program compiles at -O0..-O3 for trn1 and trn2 and matches the references in checked mode."""
    program = generate(HypothesisChooser(data), CI_CONFIG)
    result = run_case(program.module, classes=program.classes)
    assert result.ok, result.report()
    assert not result.unsupported, result.unsupported[0]


# ---- the fuzzer's parts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", OP_CLASSES)
def test_each_class_alone_builds_verified_programs(cls):
    config = GenConfig(classes=(cls,), max_elements=1 << 10)
    seen = set()
    for seed in range(25):
        program = generate(RandomChooser(seed), config)  # generate() runs the verifier
        assert program.classes <= {cls}
        seen |= program.classes
    assert seen == {cls}


def test_unknown_class_is_refused():
    with pytest.raises(ValueError, match="unknown op class"):
        GenConfig(classes=("elementwise", "scatter"))


def test_replay_rebuilds_the_same_program():
    for seed in range(10):
        program = generate(RandomChooser(seed))
        again = generate(ReplayChooser(program.choices))
        assert print_module(again.module) == print_module(program.module)
        assert again.choices == program.choices


def test_references_agree_with_the_interpreter():
    from hlo.interpreter import evaluate

    for seed in range(15):
        module = generate(RandomChooser(seed), GenConfig(max_elements=1 << 10)).module
        inputs = random_inputs(module)
        exact = exact_outputs(module, inputs)
        dtypes = [e.value.dtype for e in exact]
        assert len(dtypes) == len(torch_outputs(module, inputs))
        for got, want in zip(evaluate(parse_module(print_module(module)), inputs), exact):
            assert check(np.asarray(got), want, _dtype(got)) is None


def _dtype(array: np.ndarray) -> str:
    return "bf16" if array.dtype.name == "bfloat16" else "f32"


def test_check_tells_rounding_from_wrong_values():
    module = parse_module("""HloModule m
ENTRY %main (x: f32[64], y: f32[64]) -> bf16[64] {
  %x = f32[64]{0} parameter(0)
  %y = f32[64]{0} parameter(1)
  %a = f32[64]{0} add(f32[64]{0} %x, f32[64]{0} %y)
  ROOT %c = bf16[64]{0} convert(f32[64]{0} %a)
}
""")
    x, y = random_inputs(module)
    (exact,) = exact_outputs(module, [x, y])
    bf16 = (x + y).astype(exact.value.numpy().dtype).astype(np.float32)
    rounded = (x + y).astype("bfloat16") if hasattr(np, "bfloat16") else _bf16(x + y)
    assert check(rounded, exact, "bf16") is None
    wrong = _bf16(bf16 + np.where(np.arange(64) == 7, 0.25, 0.0).astype(np.float32))
    assert "1 of 64 elements off; worst at [7]" in check(wrong, exact, "bf16")
    assert "expected bf16[64]" in check(np.zeros(64, np.float32), exact, "bf16")


def _bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


def test_shrinker_minimizes_a_synthetic_failure():
    """Shrink toward 'has a dot contracting at least 5 elements' without compiling anything."""
    def has_big_dot(program) -> bool:
        return any(i.opcode == "dot" and i.operands[0].shape.dims[i.attrs["lhs_contracting_dims"][0]] >= 5
                   for i in program.module.entry.instructions)

    config = GenConfig(classes=("dot", "elementwise", "transpose"), max_ops=8)
    start = next(p for p in (generate(RandomChooser(s), config) for s in range(200))
                 if has_big_dot(p) and len(p.module.entry.instructions) > 6)
    shrunk = shrink(start.choices, config, has_big_dot, max_evaluations=400)
    assert has_big_dot(shrunk.program)
    assert len(shrunk.program.choices) < len(start.choices)
    dots = [i for i in shrunk.program.module.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 1 and dots[0].operands[0].shape.dims[dots[0].attrs["lhs_contracting_dims"][0]] == 5


def test_unused_parameters_are_dropped():
    module = parse_module("""HloModule m
ENTRY %main (a: f32[2], b: f32[3], c: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  %b = f32[3]{0} parameter(1)
  %c = f32[2]{0} parameter(2)
  ROOT %s = f32[2]{0} add(f32[2]{0} %a, f32[2]{0} %c)
}
""")
    trimmed = drop_unused_parameters(module)
    assert [(p.name, p.parameter_number) for p in trimmed.entry.parameters] == [("a", 0), ("c", 1)]


def test_reproducer_file_parses_and_names_the_failure(tmp_path):
    text = """HloModule m
ENTRY %main (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(f32[2]{0} %a)
}
"""
    result = run_case(text, configs=ALL_CONFIGS[:1])
    assert result.ok and result.runs == 1
    from tests.fuzz.harness import Failure

    result.failures.append(Failure("mismatch", "emulator output 0", "1 of 2 elements off */ tricky", ALL_CONFIGS[0]))
    path = save_reproducer(result, result.failures[0].signature, tmp_path, "found by a test")
    saved = path.read_text()
    assert path.name.startswith("fuzz_mismatch_") and "at: -O0 trn1" in saved and "found by a test" in saved
    assert print_module(parse_module(saved)) == print_module(parse_module(text))
