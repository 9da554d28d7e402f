"""Target files: the bundled ones load; a researcher's own file is checked for every figure."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from isa.target import load_target


@pytest.mark.parametrize("name", ["trn1", "trn2"])
def test_bundled_targets_load(name):
    target = load_target(name)
    assert target.name == name and target.partitions == 128


def test_custom_target_file(tmp_path):
    data = json.loads(resources.files("isa.targets").joinpath("trn1.json").read_text())
    data["name"] = "trn1-fast-dma"
    data["dma"]["queue_bytes_per_ns"] = 34.0
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(data))
    assert load_target(str(path)).data["dma"]["queue_bytes_per_ns"] == 34.0


def test_custom_target_missing_figures_are_named(tmp_path):
    data = json.loads(resources.files("isa.targets").joinpath("trn1.json").read_text())
    del data["pe"]["transpose"]
    del data["act"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"lacks pe\.transpose, act \(every figure"):
        load_target(str(path))


def test_unknown_target_and_bad_json(tmp_path):
    with pytest.raises(ValueError, match="unknown target 'trn9'"):
        load_target("trn9")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_target(str(bad))
