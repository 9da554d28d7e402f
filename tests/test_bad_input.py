"""Every kind of bad input gets a clear error naming what and where, a non-zero exit status and no traceback
(unless --verbose); a failed command leaves no partial output. Through compiler.cli.main, and a few times as
a real process. (Model files that raise or lack get_model are in test_cli.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.capacity import CapacityError
from compiler.cli import EXIT_ERROR, EXIT_INTERNAL, main

GOOD_HLO = """HloModule good
ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  ROOT %t = f32[4,8]{1,0} tanh(f32[4,8]{1,0} %x)
}
"""
GOOD_ASM = """.target trn1
.tensor in0 input f32 [4,8]
.tensor out0 output f32 [4,8]
sp.dma dst=sbuf[0:4]@0[1,8]:f32 src=hbm:in0@0[8,4][1,8]:f32 queue=0 signal(s1)
act.activation dst=sbuf[0:4]@64[1,8]:f32 src=sbuf[0:4]@0[1,8]:f32 func=tanh wait(s1>=1) signal(s2)
sp.dma dst=hbm:out0@0[8,4][1,8]:f32 src=sbuf[0:4]@64[1,8]:f32 queue=0 wait(s2>=1)
"""


def fails(capsys, argv: list[str], *expected: str, status: int = EXIT_ERROR) -> str:
    """Run the CLI, expect `status`, one clear error line naming every `expected` piece, no traceback."""
    assert main(argv) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert err.startswith(f"neuronc {argv[0]}: error: "), err
    for piece in expected:
        assert piece in err, f"{piece!r} not in {err!r}"
    return err


@pytest.fixture(scope="module")
def good_neff(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("good")
    (out / "good.hlo").write_text(GOOD_HLO)
    assert main(["compile", str(out / "good.hlo"), "-o", str(out / "good.neff")]) == 0
    return out / "good.neff"


# ---- malformed HLO text -------------------------------------------------------------------------------------

def _hlo(body: str, params: str = "x: f32[4,8]", result: str = "f32[4,8]") -> str:
    return f"HloModule bad\nENTRY %main ({params}) -> {result} {{\n  %x = f32[4,8]{{1,0}} parameter(0)\n{body}}}\n"


HLO_CASES = {
    "syntax": (_hlo("  ROOT %t = f32[4,8]{1,0} tanh(f32[4,8]{1,0} %x\n"),
               ["HloParseError", "bad.hlo:5:1", "syntax error", "unexpected '}'"]),
    "unknown_op": (_hlo("  ROOT %t = f32[4,8]{1,0} frobnicate(f32[4,8]{1,0} %x)\n"),
                   ["VerificationError", "bad.hlo:4", "%t (frobnicate)", "unknown opcode"]),
    "wrong_shape": (_hlo("  ROOT %t = f32[4,9]{1,0} tanh(f32[4,8]{1,0} %x)\n", result="f32[4,9]"),
                    ["VerificationError", "bad.hlo:4", "%t (tanh)", "declared f32[4,9]", "give f32[4,8]"]),
    "operand_shape": (_hlo("  ROOT %t = f32[4,8]{1,0} tanh(f32[8,4]{1,0} %x)\n"),
                      ["HloParseError", "bad.hlo:4", "%x is written with shape f32[8,4]"]),
    "undefined_name": (_hlo("  ROOT %t = f32[4,8]{1,0} tanh(f32[4,8]{1,0} %y)\n"),
                       ["HloParseError", "bad.hlo:4:", "undefined operand %y"]),
    "cycle": (_hlo("  %a = f32[4,8]{1,0} add(f32[4,8]{1,0} %x, f32[4,8]{1,0} %b)\n"
                   "  ROOT %b = f32[4,8]{1,0} tanh(f32[4,8]{1,0} %a)\n"),
              ["VerificationError", "bad.hlo:4", "cycle: %a -> %b -> %a"]),
    "unknown_dtype": (_hlo("  ROOT %t = f33[4,8]{1,0} tanh(f32[4,8]{1,0} %x)\n"),
                      ["HloParseError", "bad.hlo:4", "unknown element type 'f33'"]),
    "duplicate_name": (_hlo("  %x = f32[4,8]{1,0} tanh(f32[4,8]{1,0} %x)\n"),
                       ["HloParseError", "bad.hlo:4", "duplicate instruction name %x"]),
    "empty": ("", ["HloParseError", "ends too early", "'HloModule'"]),
    "binary": ("\x00\x01garbage\n", ["HloParseError", "bad.hlo:1:1", "\\x00\\x01garbage"]),
}


@pytest.mark.parametrize("name", HLO_CASES)
def test_malformed_hlo(tmp_path, capsys, name):
    text, expected = HLO_CASES[name]
    (tmp_path / "bad.hlo").write_text(text)
    fails(capsys, ["compile", str(tmp_path / "bad.hlo"), "-o", str(tmp_path / "bad.neff")], *expected)
    assert not (tmp_path / "bad.neff").exists()


def test_hlo_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / "bad.hlo").write_bytes(b"HloModule \xff\xfe\n")
    fails(capsys, ["compile", str(tmp_path / "bad.hlo")], "ModelLoadError", "bad.hlo", "not UTF-8",
          "0xff at offset 10")


def test_hlo_constant_without_its_side_file(tmp_path, capsys):
    (tmp_path / "c.hlo").write_text('HloModule c, neuronc_constants="gone.npz"\n'
                                    "ENTRY %main () -> f32[32] {\n"
                                    '  ROOT %w = f32[32]{0} constant({...}), data="w"\n}\n')
    fails(capsys, ["compile", str(tmp_path / "c.hlo")], "HloParseError", "gone.npz", "does not exist")


# ---- malformed ISA text -----------------------------------------------------------------------------------

def test_good_asm_assembles_and_runs(tmp_path, capsys):
    (tmp_path / "p.s").write_text(GOOD_ASM)
    assert main(["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.neff")]) == 0
    assert main(["run", str(tmp_path / "p.neff"), "--check"]) == 0


ASM_CASES = {
    "syntax": (("func=tanh", "func="), ["AsmError", "p.s:5:", "syntax error"]),
    "unknown_opcode": (("act.activation", "act.frobnicate"), ["AsmError", "p.s:5:", "unknown opcode 'frobnicate'"]),
    "wrong_engine": (("act.activation", "pe.activation"), ["AsmError", "p.s:5:", "not allowed on engine 'pe'"]),
    "undeclared_tensor": (("hbm:in0", "hbm:in7"), ["AsmError", "p.s:4:", "'in7' is not declared"]),
    "unknown_target": ((".target trn1", ".target trn9"), ["p.s", ".target trn9", "unknown target 'trn9'"]),
    "no_target": ((".target trn1\n", ""), ["AsmError", "p.s", "missing .target"]),
}


@pytest.mark.parametrize("name", ASM_CASES)
def test_malformed_asm(tmp_path, capsys, name):
    (old, new), expected = ASM_CASES[name]
    assert old in GOOD_ASM
    (tmp_path / "p.s").write_text(GOOD_ASM.replace(old, new, 1))
    fails(capsys, ["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.neff")], *expected)
    assert not (tmp_path / "p.neff").exists()


def test_asm_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / "p.s").write_bytes(b"\xff\xfe.target trn1\n")
    fails(capsys, ["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.neff")], "p.s", "not UTF-8")


@pytest.mark.parametrize("old, new, expected", [
    ("sbuf[0:4]@0[1,8]:f32 src", "sbuf[0:4]@999999[1,8]:f32 src", "outside the sbuf partition"),
    ("sbuf[0:4]@0[1,8]:f32 src", "sbuf[0:300]@0[1,8]:f32 src", "partition count over 128"),
])
def test_asm_that_breaks_a_machine_rule_is_refused_when_run(tmp_path, capsys, old, new, expected):
    (tmp_path / "p.s").write_text(GOOD_ASM.replace(old, new, 1))
    assert main(["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.neff")]) == 0
    capsys.readouterr()
    fails(capsys, ["run", str(tmp_path / "p.neff")], "RuleViolation", "instruction #0 sp.dma", expected)


# ---- truncated, corrupted or foreign .neff files ------------------------------------------------------------

def _neff_variants(data: bytes) -> dict[str, tuple[bytes, list[str]]]:
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    magic = b"XXXX" + data[4:]
    version = data[:4] + bytes([99]) + data[5:]
    return {
        "truncated": (data[: len(data) // 2], ["NeffError", "truncated", f"got {len(data) // 2}"]),
        "header_only": (data[:7], ["NeffError", "truncated", "got 7"]),
        "empty": (b"", ["NeffError", "truncated", "got 0"]),
        "corrupted": (bytes(flipped), ["NeffError", "checksum mismatch", "corrupted"]),
        "bad_magic": (magic, ["NeffError", "not a .neff file", "XXXX"]),
        "other_version": (version, ["NeffError", "format version 99", "compile the model again"]),
        "zip": (b"PK\x03\x04" + bytes(60), ["NeffError", "not a .neff file", "PK"]),
        "text": (b"hello, not a neff\n", ["NeffError", "not a .neff file"]),
    }


@pytest.mark.parametrize("command", ["run", "profile", "disasm"])
@pytest.mark.parametrize("variant", ["truncated", "header_only", "empty", "corrupted", "bad_magic",
                                     "other_version", "zip", "text"])
def test_bad_neff(good_neff, tmp_path, capsys, command, variant):
    data, expected = _neff_variants(good_neff.read_bytes())[variant]
    bad = tmp_path / "bad.neff"
    bad.write_bytes(data)
    fails(capsys, [command, str(bad)], str(bad), *expected)


def test_neff_that_is_a_folder_or_missing(tmp_path, capsys):
    fails(capsys, ["run", str(tmp_path)], str(tmp_path), "cannot read")
    fails(capsys, ["run", str(tmp_path / "none.neff")], "none.neff", "No such file")


def test_neff_whose_header_names_undeclared_outputs(tmp_path, capsys):
    from isa import neff
    from isa.asm import parse_program

    program = parse_program(GOOD_ASM)
    program.outputs = ["bogus"]
    neff.save(program, tmp_path / "p.neff")  # a consistent checksum over an inconsistent header
    fails(capsys, ["run", str(tmp_path / "p.neff")], "p.neff", "malformed program", "output 'bogus'")


def test_python_api_hlo_text_or_path():
    from compiler.errors import HloParseError, ModelLoadError

    with pytest.raises(HloParseError, match="expected 'HloModule'"):
        compiler.compile("ENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\n")
    with pytest.raises(ModelLoadError, match="not HLO text and not a readable file"):
        compiler.compile("x" * 5000)
    with pytest.raises(ModelLoadError, match="no such HLO file"):
        compiler.compile("missing.hlo")


def test_neff_for_an_unknown_target(tmp_path, capsys):
    (tmp_path / "p.s").write_text(GOOD_ASM)
    assert main(["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.neff")]) == 0
    from isa import neff

    program = neff.load(tmp_path / "p.neff")
    program.target = "trn9"
    neff.save(program, tmp_path / "p.neff")
    capsys.readouterr()
    fails(capsys, ["run", str(tmp_path / "p.neff")], "p.neff", "compiled for target 'trn9'")


# ---- wrong inputs to run ------------------------------------------------------------------------------------

def test_wrong_inputs(good_neff, tmp_path, capsys):
    ok = tmp_path / "ok.npy"
    np.save(ok, np.zeros((4, 8), np.float32))
    files = {"shape.npy": np.zeros((8, 4), np.float32), "f64.npy": np.zeros((4, 8)),
             "int.npy": np.zeros((4, 8), np.int32), "scalar.npy": np.float32(1)}
    for name, array in files.items():
        np.save(tmp_path / name, array)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "both.npz", a=np.zeros((4, 8), np.float32))
    (tmp_path / "garbage.npy").write_bytes(b"\x93NUMPY garbage")
    neff = str(good_neff)
    fails(capsys, ["run", neff, "--inputs", str(ok), str(ok)], "takes 1 input(s)", "in0: f32[4, 8]", "got 2")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "shape.npy")], "InputError", "shape.npy",
          "input in0 must have shape [4, 8]", "holds [8, 4]")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "f64.npy")], "f64.npy", "must be f32", "float64")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "int.npy")], "int.npy", "must be f32", "int32")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "scalar.npy")], "scalar.npy", "holds []")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "obj.npy")], "obj.npy", "cannot read",
          "allow_pickle=False")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "both.npz")], "both.npz", "is an .npz archive")
    fails(capsys, ["profile", neff, "--inputs", str(tmp_path / "garbage.npy")], "garbage.npy", "cannot read")
    fails(capsys, ["run", neff, "--inputs", str(tmp_path / "none.npy")], "none.npy", "No such file")


def test_bf16_inputs_saved_as_raw_bits_are_accepted(tmp_path, capsys):
    (tmp_path / "b.hlo").write_text(GOOD_HLO.replace("f32", "bf16"))
    assert main(["compile", str(tmp_path / "b.hlo"), "-o", str(tmp_path / "b.neff")]) == 0
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # exactly representable in bf16
    np.save(tmp_path / "x.npy", bits)
    assert main(["run", str(tmp_path / "b.neff"), "--inputs", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "o.npz")]) == 0
    out = np.load(tmp_path / "o.npz")["out0"].view(np.uint16)  # bf16 is stored as its raw bits
    np.testing.assert_allclose((out.astype(np.uint32) << 16).view(np.float32), np.tanh(x), atol=1e-2)


# ---- model files (beyond test_cli.py) -----------------------------------------------------------------------

MODEL_CASES = {
    "exit_in_get_model": ("import sys\ndef get_model():\n    sys.exit(0)\n",
                          ["ModelLoadError", "get_model() called sys.exit(0)", "m.py:3"]),
    "exit_at_import": ("import sys\nsys.exit(3)\n", ["ModelLoadError", "importing it called sys.exit(3)", "m.py:2"]),
    "syntax_error": ("def get_model(:\n    pass\n", ["ModelLoadError", "SyntaxError", "line 1"]),
    "wrong_return": ("def get_model():\n    return 42\n", ["must return (model, example_inputs)", "got int"]),
    "not_a_module": ("import torch\ndef get_model():\n    return (lambda x: x), (torch.ones(2),)\n",
                     ["ModelLoadError", "returned a function as the model", "torch.nn.Module"]),
    "entry_not_callable": ("get_model = 5\n", ["defines no function get_model()"]),
    "forward_fails": ("import torch\nfrom torch import nn\nclass M(nn.Module):\n"
                      "    def forward(self, x):\n        return x @ torch.ones(5, 3)\n"
                      "def get_model():\n    return M(), (torch.ones(2, 4),)\n",
                      ["LoweringError", "torch.export failed", "[2, 4] X [5, 3]"]),
    "unsupported_ops": ("import torch\nfrom torch import nn\nclass M(nn.Module):\n"
                        "    def forward(self, x):\n        return torch.cummin(x, 1)[0] + torch.fft.fft(x).real\n"
                        "def get_model():\n    return M(), (torch.ones(4, 4),)\n",
                        ["UnsupportedOpError", "aten.cummin", "aten._fft_r2c", "m.py:5", "list-operators"]),
}


@pytest.mark.parametrize("name", MODEL_CASES)
def test_bad_model_file(tmp_path, capsys, name):
    source, expected = MODEL_CASES[name]
    (tmp_path / "m.py").write_text(source)
    err = fails(capsys, ["compile", str(tmp_path / "m.py"), "-o", str(tmp_path / "m.neff")], *expected)
    assert "fake_tensor" not in err  # torch's own logged tracebacks are silenced
    assert not (tmp_path / "m.neff").exists()


def test_other_model_arguments(tmp_path, capsys):
    fails(capsys, ["compile", str(tmp_path)], "is a directory, not a model file")
    (tmp_path / "m.onnx").write_text("x")
    fails(capsys, ["compile", str(tmp_path / "m.onnx")], "unknown model format '.onnx'", ".py, .pt2, .hlo")
    (tmp_path / "m.pt2").write_text("not a zip")
    fails(capsys, ["compile", str(tmp_path / "m.pt2")], "m.pt2", "not a saved torch.export ExportedProgram")
    (tmp_path / "m.py").write_text("def get_model():\n    pass\n")
    fails(capsys, ["compile", str(tmp_path / "m.py"), "--entry", "build"], "defines no function build()")


# ---- models too large for HBM -------------------------------------------------------------------------------

HUGE_HLO = """HloModule huge
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %w = f32[70000,70000]{1,0} constant({...}), data="w"
  %s = f32[4]{0} slice(f32[70000,70000]{1,0} %w), slice={[0:1], [0:4]}
  ROOT %y = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %s)
}
"""


@pytest.fixture
def no_frontend(monkeypatch):
    """The capacity check must refuse a huge model before the frontend copies (allocates) its weights."""
    import frontend

    def unreachable(*args, **kwargs):
        raise AssertionError("the frontend was reached with a model too large for HBM")

    monkeypatch.setattr(frontend, "import_model", unreachable)


def test_huge_hlo_constant_is_refused_before_allocation(tmp_path, capsys):
    (tmp_path / "huge.hlo").write_text(HUGE_HLO)  # no side file: the data was never written
    fails(capsys, ["compile", str(tmp_path / "huge.hlo")], "CapacityError", "constant %w f32[70000,70000]",
          "alone needs 18.3 GiB", "16.0 GiB of HBM of trn1")
    fails(capsys, ["compile", str(tmp_path / "huge.hlo"), "--target", "trn2"], "12.0 GiB of HBM of trn2")
    with pytest.raises(CapacityError, match="constant %w"):
        compiler.compile(HUGE_HLO)  # HLO text: the constant has no data at all


def test_huge_lazily_created_weight_is_refused(tmp_path, capsys, no_frontend):
    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\nclass Huge(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('table', torch.zeros(1).expand(70000, 70000))  # 4 bytes in memory\n"
        "        self.fc = nn.Linear(100000, 50000, device='meta')  # never allocated\n"
        "    def forward(self, x):\n        return x + self.table[0, :4]\n"
        "def get_model():\n    return Huge(), (torch.ones(4),)\n")
    fails(capsys, ["compile", str(tmp_path / "m.py")], "CapacityError", "float32[", "alone needs",
          "cannot be placed or tiled")


def _small_target(tmp_path: Path, capacity: int) -> str:
    from importlib import resources

    data = json.loads(resources.files("isa.targets").joinpath("trn1.json").read_text())
    data["name"] = "tiny"
    data["hbm"]["capacity_bytes"] = capacity
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_weights_that_together_exceed_hbm(tmp_path, capsys, no_frontend):
    (tmp_path / "m.py").write_text("import torch\nfrom torch import nn\ndef get_model():\n"
                                   "    return nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256)), "
                                   "(torch.ones(2, 256),)\n")
    fails(capsys, ["compile", str(tmp_path / "m.py"), "--target", _small_target(tmp_path, 300_000)],
          "CapacityError", "the weights and inputs of Sequential need", "more than the", "of tiny",
          "the largest: weight 0.weight float32[256, 256]")


def test_compiled_program_whose_scratch_exceeds_hbm(tmp_path, capsys):
    hlo = """HloModule scratch
ENTRY %main (x: f32[256,256]) -> f32[65536] {
  %x = f32[256,256]{1,0} parameter(0)
  %t = f32[256,256]{1,0} transpose(f32[256,256]{1,0} %x), dimensions={1,0}
  %r = f32[65536]{0} reshape(f32[256,256]{1,0} %t)
  ROOT %y = f32[65536]{0} tanh(f32[65536]{0} %r)
}
"""
    program = compiler.compile(hlo, opt_level=0).program
    io_bytes = sum(t.nbytes for t in program.tensors.values() if t.kind in ("input", "output"))
    total = sum(t.nbytes for t in program.tensors.values())
    assert total > io_bytes, "the backend no longer needs HBM scratch here: pick another program"
    (tmp_path / "s.hlo").write_text(hlo)
    # the parameter and the output fit; the scratch of the reshape's copy does not
    fails(capsys, ["compile", str(tmp_path / "s.hlo"), "-O0", "-o", str(tmp_path / "s.neff"),
                   "--target", _small_target(tmp_path, total - 1)],
          "CapacityError", "the HBM tensors of the compiled program need", "of tiny")
    assert not (tmp_path / "s.neff").exists()


def test_malformed_target_files(tmp_path, capsys):
    (tmp_path / "g.hlo").write_text(GOOD_HLO)
    (tmp_path / "bad.json").write_text("{not json")
    fails(capsys, ["compile", str(tmp_path / "g.hlo"), "--target", str(tmp_path / "bad.json")],
          "target file", "bad.json", "not valid JSON")
    (tmp_path / "empty.json").write_text("{}")
    fails(capsys, ["compile", str(tmp_path / "g.hlo"), "--target", str(tmp_path / "empty.json")],
          "empty.json")
    fails(capsys, ["compile", str(tmp_path / "g.hlo"), "--target", "trn9"], "unknown target 'trn9'")


# ---- outputs: checked before any work, never partial -------------------------------------------------------

def test_unwritable_outputs_are_refused_before_work(good_neff, tmp_path, capsys):
    (tmp_path / "g.hlo").write_text(GOOD_HLO)
    fails(capsys, ["compile", str(tmp_path / "g.hlo"), "-o", str(tmp_path / "no" / "x.neff")],
          "the output .neff", "the folder", "does not exist")
    fails(capsys, ["compile", str(tmp_path / "g.hlo"), "-o", str(tmp_path)], "is a directory")
    fails(capsys, ["run", str(good_neff), "--output", str(tmp_path / "no" / "o.npz")], "--output", "does not exist")
    assert "out0" not in capsys.readouterr().out  # refused before running
    fails(capsys, ["profile", str(good_neff), "--trace", str(tmp_path / "no" / "t.json")], "--trace")
    fails(capsys, ["asm", str(tmp_path / "g.hlo"), "-o", str(tmp_path / "no" / "p.neff")], "does not exist")


def test_bad_options(good_neff, tmp_path, capsys):
    (tmp_path / "g.hlo").write_text(GOOD_HLO)
    compile_ = ["compile", str(tmp_path / "g.hlo"), "-o", str(tmp_path / "g.neff")]
    fails(capsys, compile_ + ["--dump-dir", str(tmp_path / "g.hlo")], "--dump-dir", "is not a folder")
    fails(capsys, compile_ + ["--dump-dir", str(tmp_path / "d"), "--dump-pass-re", "(unclosed"],
          "PassOptionError", "--dump-pass-re '(unclosed' is not a valid regex")
    fails(capsys, compile_ + ["--disable-pass", "nosuchpass"], "unknown pass name(s) nosuchpass", "known passes")
    fails(capsys, compile_ + ["--fusion", "weird"], "fusion='weird'")
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(good_neff), "--seed", "-5"])
    assert exit_.value.code == 2 and "seeds are integers >= 0" in capsys.readouterr().err
    assert not (tmp_path / "g.neff").exists()


def test_failed_compile_leaves_no_partial_neff_and_keeps_an_old_one(tmp_path, capsys):
    (tmp_path / "bad.hlo").write_text(HLO_CASES["cycle"][0])
    out = tmp_path / "x.neff"
    fails(capsys, ["compile", str(tmp_path / "bad.hlo"), "-o", str(out)], "cycle")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.hlo"]
    out.write_bytes(b"the previous build")
    os.utime(out, (1_000_000, 1_000_000))
    fails(capsys, ["compile", str(tmp_path / "bad.hlo"), "-o", str(out)], "cycle")
    assert out.read_bytes() == b"the previous build" and out.stat().st_mtime == 1_000_000


def test_failure_while_writing_the_neff_keeps_the_old_one(tmp_path, capsys, monkeypatch):
    from isa import neff
    from isa.errors import ProgramError

    (tmp_path / "g.hlo").write_text(GOOD_HLO)
    out = tmp_path / "x.neff"
    out.write_bytes(b"the previous build")

    def broken_encode(program, **kwargs):
        raise ProgramError("instruction 2 (act.activation): cannot be encoded")

    monkeypatch.setattr(neff, "encode", broken_encode)
    # --no-cache: storing the cache entry encodes too, and its warning ("cannot store") would come first whenever
    # the warning reaches stderr (pytest's logging plugin usually keeps it, but not in every worker's state)
    fails(capsys, ["compile", str(tmp_path / "g.hlo"), "-o", str(out), "--no-cache"], "ProgramError",
          "cannot be encoded")
    assert out.read_bytes() == b"the previous build"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.hlo", "x.neff"]  # no temp file left


def test_run_output_is_written_whole(good_neff, tmp_path, capsys, monkeypatch):
    out = tmp_path / "o.npz"
    out.write_bytes(b"old")

    def broken_savez(file, **arrays):
        file.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", broken_savez)
    fails(capsys, ["run", str(good_neff), "--output", str(out)], "No space left on device")
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["o.npz"]


# ---- exit statuses, --verbose, real processes ---------------------------------------------------------------

def test_internal_errors_are_reported_as_bugs(tmp_path, capsys, monkeypatch):
    from compiler import driver

    def crash(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(driver, "compile_options", crash)
    (tmp_path / "g.hlo").write_text(GOOD_HLO)
    argv = ["compile", str(tmp_path / "g.hlo"), "-o", str(tmp_path / "g.neff")]
    fails(capsys, argv, "internal error", "KeyError", "bug in neuronc", status=EXIT_INTERNAL)
    assert main(argv + ["--verbose"]) == EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err


def test_verbose_shows_the_traceback_after_the_command_too(tmp_path, capsys):
    (tmp_path / "bad.hlo").write_text(HLO_CASES["cycle"][0])
    for argv in (["--verbose", "compile", str(tmp_path / "bad.hlo")],
                 ["compile", str(tmp_path / "bad.hlo"), "--verbose"]):
        assert main(argv) == EXIT_ERROR
        err = capsys.readouterr().err
        assert "Traceback" in err and "cycle" in err


NEURONC = Path(sys.executable).parent / "neuronc"


@pytest.mark.parametrize("argv, expected", [
    (["compile", "{dir}/bad.hlo", "-o", "{dir}/bad_out.neff"], "VerificationError"),
    (["run", "{dir}/bad.neff"], "NeffError"),
    (["run", "{good}", "--inputs", "{dir}/x.npy"], "InputError"),
])
def test_as_a_process(good_neff, tmp_path, argv, expected):
    (tmp_path / "bad.hlo").write_text(HLO_CASES["unknown_op"][0])
    (tmp_path / "bad.neff").write_bytes(b"NEFF\x02\x00\x00\x00")
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    result = subprocess.run([str(NEURONC)] + [a.format(dir=tmp_path, good=good_neff) for a in argv],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == EXIT_ERROR
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") <= 2  # one error line and the --verbose hint


def test_export_failure_as_a_process_shows_no_torch_log(tmp_path):
    (tmp_path / "m.py").write_text(MODEL_CASES["forward_fails"][0])
    result = subprocess.run([str(NEURONC), "compile", str(tmp_path / "m.py"), "-o", str(tmp_path / "m.neff")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == EXIT_ERROR
    assert "LoweringError" in result.stderr and "Traceback" not in result.stderr
    assert "fake_tensor" not in result.stderr
