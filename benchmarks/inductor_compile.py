"""torch.compile (inductor) of a model file's model, caches off: the reference for compile time.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 .venv/bin/python benchmarks/inductor_compile.py benchmarks/hf_gpt2_small.py

Builds the model (get_model()), compiles it with inductor and runs it once (inductor compiles at the
first call), as `neuronc compile MODEL` builds, compiles and writes it: timed side by side as whole
processes. Caches are forced off here too, whatever the environment says.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.model_files import load_model_file  # noqa: E402


def main() -> int:
    model, example, _ = load_model_file(sys.argv[1])
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*example)
    return 0


if __name__ == "__main__":
    sys.exit(main())
