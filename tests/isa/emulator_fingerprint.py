"""Fingerprints of emulated runs (outputs bit for bit, the whole timeline), and the programs they
were recorded from (tests/isa/data/emulator/*.neff, compiled from zoo models).

``python -m tests.isa.emulator_fingerprint`` records them again with whatever ``isa`` is first on
the path. The stored ones come from the emulator before the decode-once/replay work (commit
2b023ec), so a change of any output bit or of any instruction's start or end time shows in
tests/isa/test_emulator_speed.py. The programs were compiled (commit 2b023ec) with
``compiler.compile(ZOO[name](), **MODELS[name])`` and ``Executable.save``; they stay fixed when the
compiler changes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from isa.dtypes import dtype as lookup_dtype
from isa.emulator import Profile, run_program
from isa.neff import load
from isa.program import Program

DATA = Path(__file__).parent / "data" / "emulator"
FINGERPRINTS = DATA / "fingerprints.json"
# zoo model -> compile options; small programs (tens of KiB) that cover PE, ACT, DVE, POOL and DMA
MODELS: dict[str, dict] = {
    "mlp": {"auto_cast": "matmult"},
    "gpt_block": {},
    "hf_gpt2": {"auto_cast": "matmult"},
    "resnet": {},
}


def inputs(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs: normal floats, small non-negative integers (valid ids)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in program.inputs:
        decl = program.tensors[name]
        dt = lookup_dtype(decl.dtype).numpy
        if dt.kind in "iu":
            feeds[name] = rng.integers(0, 8, size=decl.shape).astype(dt)
        else:
            feeds[name] = rng.standard_normal(decl.shape).astype(np.float32).astype(dt)
    return feeds


def fingerprint(outputs: dict[str, np.ndarray], profile: Profile) -> dict[str, str]:
    """sha256 of every output's bytes and of the timeline (every span's track, start and length)."""
    result = {f"output:{name}": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
              for name, v in sorted(outputs.items())}
    spans = [(s.track, s.index, s.start_ns, s.dur_ns) for s in profile.spans]
    result["timeline"] = hashlib.sha256(repr(spans).encode()).hexdigest()
    result["time_us"] = repr(profile.time_us)
    return result


def record() -> None:  # pragma: no cover - run by hand
    """Record the fingerprints of the stored programs with the ``isa`` on the path."""
    prints = {}
    for name in MODELS:
        program = load(DATA / f"{name}.neff")
        result = run_program(program, inputs(program))
        prints[name] = fingerprint(result.outputs, result.profile)
    FINGERPRINTS.write_text(json.dumps(prints, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    record()
