#!/usr/bin/env bash
# The test suite as CI runs it: lint, then every test not marked slow, on both cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -m "not slow" -n 2 "$@"
