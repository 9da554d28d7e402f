"""constant_folding: converts/transposes/reshapes of constants and small broadcasts become constants."""

from __future__ import annotations

import numpy as np

from compiler.passes.simplify.constant_folding import ConstantFolding
from compiler.passes.simplify.dce import DeadCodeElimination
from hlo.ir import Quoted
from hlo.parser import parse_module
from tests.compiler.golden.harness import GOLDEN_DIR, parse_with_constants, run_golden


def test_golden():
    run_golden("constant_folding", [ConstantFolding(), ConstantFolding(), ConstantFolding(), DeadCodeElimination()])


def test_large_results_get_fresh_unique_keys():
    module = parse_with_constants((GOLDEN_DIR / "constant_folding.in.hlo").read_text())
    while ConstantFolding().run(module):
        pass
    keys = [i.attrs["data"].text for i in module.entry.instructions
            if i.opcode == "constant" and isinstance(i.attrs.get("data"), Quoted)]
    assert len(keys) == len(set(keys))
    assert "fc.weight.transpose" in keys and "fc.weight.transpose.convert.convert" in keys


def test_large_broadcast_is_not_expanded():
    module = parse_with_constants((GOLDEN_DIR / "constant_folding.in.hlo").read_text())
    ConstantFolding().run(module)
    big = next(i for i in module.entry.instructions if i.name == "big")
    assert big.opcode == "broadcast"


def test_only_ops_with_known_semantics_are_folded():
    module = parse_module("""HloModule m
ENTRY %main () -> (f32[2], f32[2]) {
  %c = f32[2]{0} constant({-1, 1})
  %g = f32[2]{0} custom-call(f32[2]{0} %c), custom_call_target="gelu"
  %u = f32[2]{0} custom-call(f32[2]{0} %c), custom_call_target="my_kernel"
  ROOT %out = (f32[2]{0}, f32[2]{0}) tuple(f32[2]{0} %g, f32[2]{0} %u)
}
""")
    assert ConstantFolding().run(module)
    g, u = module.entry.root.operands
    assert g.opcode == "constant" and u.opcode == "custom-call"
    np.testing.assert_allclose(g.literal, [-0.15865526, 0.8413447], rtol=1e-6)


def test_golden_more_ops():
    # slice, pad, concatenate, reduce, dot, gather of constants fold; iota stays; a result never outgrows
    # its largest operand (the big negate and gather fold, with fresh data keys)
    run_golden("constant_folding_ops", [ConstantFolding(), ConstantFolding(), ConstantFolding(),
                                        DeadCodeElimination()])


def test_golden_shape_only_chains():
    # values built from constants, iotas and broadcasts only fold at their chain's root when the chain holds a
    # non-trivial op: an s64 cumsum (reduce-window) of ones into position ids, a 2-index gather of token-type
    # ids, a reduce of an iota (whose large broadcast stays a broadcast of the folded scalar); a plain iota, a
    # 300x300 causal mask (> CHAIN_FOLD_MAX elements) and anything reading a parameter stay
    after = run_golden("constant_folding_shape_only", [ConstantFolding(), DeadCodeElimination()])
    ops = {i.name: i.opcode for i in after.entry.instructions}
    assert ops["wide"] == "broadcast" and ops["causal"] == "compare" and ops["tt"] == "iota"
    assert not any(op in ("reduce-window", "reduce") for op in ops.values())
    emb, _, types, wide, _, _ = after.entry.root.operands
    np.testing.assert_array_equal(emb.operands[1].literal, np.tile(np.arange(10, dtype=np.int32), (2, 1)))
    np.testing.assert_array_equal(types.literal, np.zeros((2, 9), np.int32))
    assert wide.operands[0].literal == 120
