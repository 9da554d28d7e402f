"""Provenance end to end: torch module paths into HLO metadata, through CSE, constant folding and fusion,
onto every ISA instruction and into the .neff; the profile's rows name HLO instructions; the CLI."""

from __future__ import annotations

import csv
import re

import pytest
import torch
from torch import nn

import compiler
from compiler.cli import main
from compiler.passes.fusion.fusion_pass import FusionPass
from compiler.passes.simplify.constant_folding import ConstantFolding
from compiler.passes.simplify.cse import CommonSubexpressionElimination
from hlo.parser import parse_module
from hlo.provenance import Provenance, all_provenances, provenances
from isa.emulator.attribution import layer_of
from tests.frontend.zoo import ZOO
from tests.isa.test_attribution import check_html


def _module(body: str, params: str = "x: f32[4]", result: str = "f32[4]"):
    return parse_module(f"HloModule m\nENTRY %main ({params}) -> {result} {{\n{body}}}\n")


def test_cse_keeps_the_origins_of_what_it_merges():
    module = _module("""  %x = f32[4]{0} parameter(0)
  %a = f32[4]{0} exponential(f32[4]{0} %x), metadata={op_name="aten.exp" module="h.0" source_file="m.py" source_line=3}
  %b = f32[4]{0} exponential(f32[4]{0} %x), metadata={op_name="aten.exp" module="h.1" source_file="m.py" source_line=3}
  ROOT %s = f32[4]{0} add(f32[4]{0} %a, f32[4]{0} %b), metadata={op_name="aten.add" module="h"}
""")
    assert CommonSubexpressionElimination().run(module)
    (kept,) = [i for i in module.entry.instructions if i.opcode == "exponential"]
    assert provenances(kept) == (Provenance("h.0", "aten.exp", "m.py:3"), Provenance("h.1", "aten.exp", "m.py:3"))


def test_constant_folding_keeps_the_origin_and_merges_a_folded_chain():
    module = _module("""  %x = f32[4]{0} parameter(0)
  %c = f32[4]{0} constant({1, 2, 3, 4}), metadata={op_name="w"}
  %n = f32[4]{0} negate(f32[4]{0} %c), metadata={op_name="aten.neg" module="scale"}
  %i = s32[4]{0} iota(), iota_dimension=0, metadata={op_name="aten.arange" module="mask"}
  %two = s32[] constant(2)
  %b = s32[4]{0} broadcast(s32[] %two), dimensions={}
  %lt = pred[4]{0} compare(s32[4]{0} %i, s32[4]{0} %b), direction=LT, metadata={op_name="aten.lt" module="mask.cmp"}
  %m = f32[4]{0} multiply(f32[4]{0} %x, f32[4]{0} %n), metadata={op_name="aten.mul" module="scale"}
  %z = f32[4]{0} broadcast(f32[] constant(0)), dimensions={}
  ROOT %s = f32[4]{0} select(pred[4]{0} %lt, f32[4]{0} %m, f32[4]{0} %z), metadata={op_name="aten.where"}
""".replace("broadcast(f32[] constant(0))", "broadcast(f32[] %zero)").replace(
        "  %z =", "  %zero = f32[] constant(0)\n  %z ="))
    assert ConstantFolding().run(module)
    by_name = {i.name: i for i in module.entry.instructions}
    mul, select = by_name["m"], module.entry.root
    assert mul.operands[1].opcode == "constant" and provenances(mul.operands[1]) == (Provenance("scale", "aten.neg"),)
    mask = select.operands[0]
    assert mask.opcode == "constant"
    assert provenances(mask) == (Provenance("mask.cmp", "aten.lt"), Provenance("mask", "aten.arange"))


def test_a_fusion_keeps_the_origins_of_all_it_fused():
    module = _module("""  %x = f32[4]{0} parameter(0)
  %e = f32[4]{0} exponential(f32[4]{0} %x), metadata={op_name="aten.exp" module="h.0.act"}
  %t = f32[4]{0} tanh(f32[4]{0} %e), metadata={op_name="aten.tanh" module="h.0.mlp"}
  ROOT %m = f32[4]{0} multiply(f32[4]{0} %t, f32[4]{0} %x), metadata={op_name="aten.mul" module="h.0"}
""")
    assert FusionPass().run(module)
    (fusion,) = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert set(all_provenances(fusion)) == {Provenance("h.0.act", "aten.exp"), Provenance("h.0.mlp", "aten.tanh"),
                                            Provenance("h.0", "aten.mul")}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.GELU())
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.body(x)) * 2.0


@pytest.fixture(scope="module")
def net_exe():
    torch.manual_seed(0)
    return compiler.compile(Net().eval(), (torch.randn(4, 16),))


def _hlo_names(hlo: str) -> set[str]:
    return set(re.findall(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=", hlo, re.M))


def test_module_paths_reach_the_hlo_and_every_instruction_is_tagged(net_exe, tmp_path):
    assert 'module="body.0"' in net_exe.hlo and 'module="head"' in net_exe.hlo
    names = _hlo_names(net_exe.hlo)
    program = net_exe.program
    assert all(inst.origin in names for inst in program.instructions)
    assert set(program.origins) == {inst.origin for inst in program.instructions}
    first = next(o for o in program.origins.values() if "body.0" in o.modules)
    assert first.flops == 2 * 4 * 16 * 32  # the dot of body.0
    assert first.hbm_bytes >= 4 * 16 * 4 + 16 * 32 * 4  # x and the weight, read once
    net_exe.save(tmp_path / "net.neff")
    assert compiler.load(tmp_path / "net.neff").program.origins == program.origins


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    model, inputs = ZOO["hf_gpt2"]()
    exe = compiler.compile(model, inputs)
    return exe, exe.profile(*exe.random_inputs())


def test_gpt2_rows_sum_name_hlo_instructions_and_trace_to_modules(gpt2, tmp_path):
    exe, prof = gpt2
    rows = prof.by_op()
    assert abs(sum(r.time_us for r in rows) - prof.time_us) <= 0.01 * prof.time_us
    assert {r.name for r in rows} <= _hlo_names(exe.hlo)
    assert prof.traced_fraction() >= 0.8
    for row in rows:  # no op is credited to two transformer blocks (shared mask: CSE'd once, fused into each)
        assert len({layer_of(m, 2) for m in row.modules if m.startswith("h.")}) <= 1, (row.name, row.modules)
    layers = {g.path for g in prof.by_layer(2)}
    assert {"h.0", "h.1"} <= layers
    assert any(r.flops > 0 and r.bound_us > 0 for r in rows)
    prof.save_html(str(tmp_path / "gpt2.html"))
    text = check_html(tmp_path / "gpt2.html")
    assert "h.0.attn" in text


def test_cli_profile_by_layer_top_csv_and_html(net_exe, tmp_path, capsys):
    neff = tmp_path / "net.neff"
    net_exe.save(neff)
    table, html = tmp_path / "rows.csv", tmp_path / "report.html"
    assert main(["profile", str(neff), "--by", "layer", "--depth", "1", "--top", "2", "--csv", str(table),
                 "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "MFU" in out and "layer" in out and "bound us" in out and f"wrote {html}" in out
    rows = list(csv.DictReader(table.open()))
    assert {r["path"] for r in rows} <= {"body", "head", "(no module)"} and "body" in {r["path"] for r in rows}
    check_html(html)
    assert main(["profile", str(neff), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "of bound" in out and "B/DMA" in out and "more)" in out
    with pytest.raises(SystemExit):
        main(["profile", str(neff), "--by", "engine"])
    with pytest.raises(SystemExit):
        main(["profile", str(neff), "--top", "0"])


def test_module_paths_of_export_fx_and_dynamo_forms():
    from types import SimpleNamespace

    from frontend.lowering import module_path

    def node(stack):
        return SimpleNamespace(meta={"nn_module_stack": stack} if stack is not None else {})

    assert module_path(node({"a": ("", "M"), "b": ("h.0.attn.c_attn", "Conv1D")})) == "h.0.attn.c_attn"
    assert module_path(node({"L__self___h_0": ("L['self'].h[0].attn", "GPT2Attention")})) == "h.0.attn"
    assert module_path(node({"x": ("L['self'].blocks['enc'].fc", "Linear")})) == "blocks.enc.fc"
    assert module_path(node({"x": "layers.1"})) == "layers.1"
    assert module_path(node(None)) == "" and module_path(node({"r": ("", "M")})) == ""
