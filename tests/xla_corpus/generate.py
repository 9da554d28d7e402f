"""Writes the XLA conformance corpus: HLO text written by XLA itself, with inputs and jax's outputs.

    PYTHONPATH=$PWD .venv/bin/python -m tests.xla_corpus.generate        # needs the dev extra (jax[cpu])
    PYTHONPATH=$PWD .venv/bin/python -m tests.xla_corpus.generate NAME...   # only these cases (new ones)

For every case in ``cases.py``: ``jax.jit(f).lower(*args).compiler_ir('hlo').as_hlo_text()`` goes to
``cases/<name>.hlo`` and the arguments (``in0, in1, ...``) and jax's results on CPU (``out0, out1, ...``) to
``cases/<name>.npz`` (bf16 and fp8 arrays as their raw bits, see ``corpus.py``). The tests and the survey read
these files only: they need no jax.
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np

from tests.xla_corpus.cases import CASES
from tests.xla_corpus.corpus import CASES_DIR, MANIFEST, encode_arrays

MAX_BYTES = 48 * 1024  # a corpus file stays small


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _flatten(v)]
    return [np.asarray(value)]


def main(argv: list[str] | None = None) -> int:
    only = set(sys.argv[1:] if argv is None else argv)
    unknown = only - {c.name for c in CASES}
    if unknown:
        print(f"unknown cases: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 1
    jax.config.update("jax_platforms", "cpu")
    CASES_DIR.mkdir(parents=True, exist_ok=True)
    known = set()
    manifest = json.loads(MANIFEST.read_text()) if only and MANIFEST.exists() else {}
    for case in CASES:
        assert case.name not in known, case.name
        known.add(case.name)
        if only and case.name not in only:
            continue
        manifest[case.name] = {"family": case.family, "doc": case.doc}
        args = case.make_args()
        text = jax.jit(case.fn).lower(*args).compiler_ir("hlo").as_hlo_text()
        outs = _flatten(jax.jit(case.fn)(*args))
        arrays = {f"in{i}": np.asarray(a) for i, a in enumerate(args)}
        arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
        hlo_path = CASES_DIR / f"{case.name}.hlo"
        npz_path = CASES_DIR / f"{case.name}.npz"
        hlo_path.write_text(text)
        np.savez_compressed(npz_path, **encode_arrays(arrays))
        for p in (hlo_path, npz_path):
            if p.stat().st_size > MAX_BYTES:
                print(f"{p.name}: {p.stat().st_size} bytes, over {MAX_BYTES}", file=sys.stderr)
                return 1
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if only:
        print(f"{len(only)} cases written to {CASES_DIR}")
        return 0
    for stale in CASES_DIR.iterdir():
        if stale.suffix in (".hlo", ".npz") and stale.stem not in known:
            stale.unlink()
    print(f"{len(CASES)} cases written to {CASES_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
