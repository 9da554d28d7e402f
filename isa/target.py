"""Target machine descriptions, loaded from the JSON data files in isa/targets/."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Target:
    name: str
    data: dict[str, Any]

    @property
    def partitions(self) -> int:
        return self.data["partitions"]

    @property
    def sbuf_partition_bytes(self) -> int:
        return self.data["sbuf_partition_bytes"]

    @property
    def psum_partition_bytes(self) -> int:
        return self.data["psum_partition_bytes"]

    @property
    def psum_bank_bytes(self) -> int:
        return self.data["psum_bank_bytes"]

    def clock_ghz(self, engine: str) -> float:
        return self.data["clock_ghz"][engine]

    @property
    def pe_peak_flops_bf16(self) -> float:
        """128x128 MACs per PE cycle, 2 FLOPs each."""
        return 2 * 128 * 128 * self.clock_ghz("pe") * 1e9


TARGET_NAMES = ("trn1", "trn2")


def load_target(name_or_path: str) -> Target:
    """Load a bundled target by name (trn1, trn2) or a researcher's own JSON file by path."""
    if name_or_path in TARGET_NAMES:
        text = resources.files("isa.targets").joinpath(f"{name_or_path}.json").read_text()
    else:
        try:
            with open(name_or_path) as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"unknown target {name_or_path!r}: not one of {TARGET_NAMES} "
                             f"and not a readable JSON file ({e.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"target file {name_or_path}: not valid JSON ({e})") from None
    if name_or_path not in TARGET_NAMES:
        reference = json.loads(resources.files("isa.targets").joinpath("trn1.json").read_text())
        missing = _missing_keys(reference, data)
        if missing:
            raise ValueError(f"target file {name_or_path} lacks {', '.join(missing)} "
                             f"(every figure of isa/targets/trn1.json must be given)")
    return Target(data["name"], data)


def _missing_keys(reference: dict[str, Any], data: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the keys of `reference` (recursively) that `data` does not have."""
    if not isinstance(data, dict):
        return [prefix.rstrip(".") or "(the top level must be a JSON object)"]
    missing = []
    for key, value in reference.items():
        if key not in data:
            missing.append(prefix + key)
        elif isinstance(value, dict):
            missing.extend(_missing_keys(value, data[key], f"{prefix}{key}."))
    return missing
