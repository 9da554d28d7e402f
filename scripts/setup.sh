#!/usr/bin/env bash
# Create .venv with the project and its dev and models dependencies, once (re-run when pyproject.toml changes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
stamp=.venv/.neuronc-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]]; then
    "$PY" -m venv .venv
fi
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    # torch is pinned to 2.13.0: the CPU wheel; an unpinned torch would pull GBs of CUDA packages.
    .venv/bin/pip install --quiet --disable-pip-version-check "torch==2.13.0"
    # models: transformers, for the examples and their tests (tests/models skip without it)
    .venv/bin/pip install --quiet --disable-pip-version-check -e ".[dev,models]"
    echo "$want" > "$stamp"
fi
