"""The weights side file (isa/weights.py): safetensors, memory-mapped, refused when foreign."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from isa import neff, weights
from isa.dtypes import DTYPES
from isa.emulator import run_program
from isa.errors import NeffError
from isa.program import AccessPattern, Instruction, Program

CONSTANTS = {
    "a": np.arange(7, dtype=np.float32).astype(ml_dtypes.bfloat16),
    "b": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    "c": np.arange(-2, 3, dtype=np.int8),
    "d": np.zeros((0, 2), np.float32),
    "e": np.array([1.5, -2, 448], dtype=ml_dtypes.float8_e4m3fn),
}
EXPECTED = {"a": ("bf16", (7,)), "b": ("f32", (3, 4)), "c": ("i8", (5,)), "d": ("f32", (0, 2)), "e": ("fp8e4", (3,))}


def _written(tmp_path):
    path = tmp_path / "m.neff.safetensors"
    ident = weights.weights_id(CONSTANTS)
    weights.write(path, CONSTANTS, ident)
    return path, ident


def test_round_trip_is_exact_and_mapped_read_only(tmp_path):
    path, ident = _written(tmp_path)
    loaded = weights.read(path, ident, EXPECTED, verify=True)
    for name, array in CONSTANTS.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        assert loaded[name].tobytes() == array.tobytes()
        assert not loaded[name].flags.writeable


def test_the_file_is_plain_safetensors(tmp_path):
    path, _ = _written(tmp_path)
    loaded = load_file(path)  # torch's reader knows bf16 and fp8
    assert loaded["a"].dtype == torch.bfloat16 and loaded["e"].dtype == torch.float8_e4m3fn
    np.testing.assert_array_equal(loaded["a"].float().numpy(), CONSTANTS["a"].astype(np.float32))
    np.testing.assert_array_equal(loaded["b"].numpy(), CONSTANTS["b"])


def test_side_path():
    assert str(weights.side_path("out/gpt2.neff")) == "out/gpt2.neff.safetensors"


def test_foreign_missing_and_mismatched_files_are_refused(tmp_path):
    path, ident = _written(tmp_path)
    with pytest.raises(NeffError, match="another compile"):
        weights.read(path, "0" * 64, EXPECTED)
    with pytest.raises(NeffError, match="missing"):
        weights.read(tmp_path / "none.safetensors", ident, EXPECTED)
    with pytest.raises(NeffError, match="declares"):
        weights.read(path, ident, {**EXPECTED, "b": ("f32", (4, 3))})
    with pytest.raises(NeffError, match="no tensor"):
        weights.read(path, ident, {**EXPECTED, "z": ("f32", (1,))})
    (tmp_path / "junk.safetensors").write_bytes(b"\x01")
    with pytest.raises(NeffError, match="truncated"):
        weights.read(tmp_path / "junk.safetensors", ident, EXPECTED)


def test_verify_finds_changed_data(tmp_path):
    path, ident = _written(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    weights.read(path, ident, EXPECTED)  # names, shapes and id still match
    with pytest.raises(NeffError, match="damaged"):
        weights.read(path, ident, EXPECTED, verify=True)


def _program_with_constants():
    prog = Program("trn1")
    prog.add_tensor("w", "const", "bf16", (4, 8))
    prog.add_tensor("out", "output", "bf16", (4, 8))
    prog.constants = {"w": np.arange(32, dtype=np.float32).reshape(4, 8).astype(ml_dtypes.bfloat16)}
    src = AccessPattern("hbm", "bf16", 0, ((1, 8),), partitions=4, tensor="w", partition_stride=8)
    dst = AccessPattern("hbm", "bf16", 0, ((1, 8),), partitions=4, tensor="out", partition_stride=8)
    prog.instructions = [Instruction("sp", "dma", {"dst": dst, "src": src}, {"queue": 0}, [], [], None)]
    return prog


@pytest.mark.parametrize("mode", ["inline", "external", "auto"])
def test_neff_with_weights_outside(tmp_path, mode):
    prog = _program_with_constants()
    path = tmp_path / "p.neff"
    neff.save(prog, path, weights=mode)
    side = weights.side_path(path)
    assert side.exists() == (mode == "external")  # auto: small constants stay inline
    loaded = neff.load(path, verify_weights=True)
    assert loaded.constants["w"].tobytes() == prog.constants["w"].tobytes()
    np.testing.assert_array_equal(run_program(loaded, {}).outputs["out"], prog.constants["w"])
    if mode == "external":
        assert path.stat().st_size < 2048 < side.stat().st_size + 2048
        with pytest.raises(NeffError, match="side file"):
            neff.decode(path.read_bytes())
        side.unlink()
        with pytest.raises(NeffError, match="weights file of this .neff is missing"):
            neff.load(path)


def test_every_isa_dtype_round_trips(tmp_path):
    """Each ISA dtype a constant can have is written and read back (a Llama causal mask is pred)."""
    constants = {d.name: np.arange(6).reshape(2, 3).astype(d.numpy) for d in DTYPES.values()}
    ident = weights.weights_id(constants)
    path = tmp_path / "all.neff.safetensors"
    weights.write(path, constants, ident)
    expected = {name: (name, (2, 3)) for name in constants}
    loaded = weights.read(path, ident, expected, verify=True)
    for name, array in constants.items():
        assert loaded[name].dtype == array.dtype and loaded[name].tobytes() == array.tobytes()


def test_id_is_xxh3_and_sha256_ids_of_older_files_still_verify(tmp_path):
    path = tmp_path / "m.neff.safetensors"
    ident = weights.weights_id(CONSTANTS)
    assert ident.startswith("xxh3-128:") and len(ident) == len("xxh3-128:") + 32
    changed = {**CONSTANTS, "c": CONSTANTS["c"] + 1}
    assert weights.weights_id(changed) != ident
    legacy = weights.weights_id(CONSTANTS, "sha256")
    assert len(legacy) == 64 and legacy != weights.weights_id(changed, "sha256")
    weights.write(path, CONSTANTS, legacy)  # a file written before the ids were XXH3
    weights.read(path, legacy, EXPECTED, verify=True)
    weights.write(path, changed, legacy)  # damaged: its data no longer matches its (SHA-256) id
    with pytest.raises(NeffError, match="does not match its id"):
        weights.read(path, legacy, EXPECTED, verify=True)


def test_direct_io_writes_the_same_file(tmp_path, monkeypatch):
    """Large side files are written with O_DIRECT through an aligned buffer (or the ordinary way where the file
    system refuses it): the same bytes, readable by safetensors itself."""
    big = {**CONSTANTS, "f": np.arange(5000, dtype=np.float32).reshape(50, 100), "g": np.ones(3, np.int64),
           "h": np.array([True, False, True]), "i": np.arange(4, dtype=np.uint16), "j": np.arange(3, dtype=np.uint8)}
    ident = weights.weights_id(big)
    weights.write(tmp_path / "plain.safetensors", big, ident)
    monkeypatch.setattr(weights, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(weights, "_DIRECT_STAGE", 8192)  # several flushes and a padded tail
    weights.write(tmp_path / "direct.safetensors", big, ident)
    data = (tmp_path / "direct.safetensors").read_bytes()
    assert data == (tmp_path / "plain.safetensors").read_bytes()
    expected = {**EXPECTED, "f": ("f32", (50, 100)), "g": ("i64", (3,)), "h": ("pred", (3,)), "i": ("u16", (4,)),
                "j": ("u8", (3,))}
    loaded = weights.read(tmp_path / "direct.safetensors", ident, expected, verify=True)
    assert all(loaded[k].tobytes() == v.tobytes() for k, v in big.items())
    torch_loaded = load_file(tmp_path / "direct.safetensors")
    assert np.array_equal(torch_loaded["f"].numpy(), big["f"]) and torch_loaded["g"].tolist() == [1, 1, 1]
    assert torch_loaded["h"].tolist() == [True, False, True]
