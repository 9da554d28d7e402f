#!/usr/bin/env bash
# Compile the bundled MLP, run it on the emulator and print its profile.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
.venv/bin/neuronc compile examples/mlp.py -o out/mlp.neff --dump-dir out/mlp_dump
.venv/bin/neuronc run out/mlp.neff --random
.venv/bin/neuronc profile out/mlp.neff --trace out/mlp_trace.json
