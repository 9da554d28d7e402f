"""XLA-style dumps of the HLO module between passes (``--dump-dir``).

File names (``NNNN`` counts the dumps of one module, starting at 0000)::

    module_0000.<name>.0000.before_optimizations.hlo
    module_0000.<name>.NNNN.after_<pass>.hlo
    module_0000.<name>.constants.npz        the large constants of every dump
    fusion_decisions.txt                    one line per fusion considered, taken or refused

Every .hlo names the constants file in its header, so each dump parses back with
``hlo.io.load_hlo_file`` and can be compiled again on its own.

The constants file holds the *union* of the large constants of all dumps. The first dump writes it through
``save_hlo_file(..., constants_file=...)``; it is rewritten only when a pass creates a constant it does not hold
yet (constant folding of a weight, say), and never loses a key, so earlier dumps stay loadable. This relies on
passes giving new data a new key; a key whose data changed between dumps is reported as an error rather than
silently making an earlier dump wrong.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from hlo.errors import CompilationError
from hlo.io import CONSTANTS_ATTR, module_constants, save_hlo_file, storable_array
from hlo.ir import Module, Quoted
from hlo.printer import print_module

DECISIONS_FILE = "fusion_decisions.txt"


def _safe(name: str) -> str:
    return re.sub(r"[^\w.+-]", "_", name) or "module"


class HloDumper:
    """Writes the numbered dumps of one module into one directory."""

    def __init__(self, dump_dir: str | os.PathLike, module_name: str, module_id: int = 0):
        self.dir = Path(dump_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prefix = f"module_{module_id:04d}.{_safe(module_name)}"
        self.constants_path = self.dir / f"{self.prefix}.constants.npz"
        self.step = 0
        self.files: list[Path] = []
        self._saved: dict[str, np.ndarray] = {}  # every array the constants file holds, by key

    def dump(self, module: Module, label: str) -> Path:
        """Write ``module`` as ``<prefix>.NNNN.<label>.hlo``; return its path."""
        path = self.dir / f"{self.prefix}.{self.step:04d}.{_safe(label)}.hlo"
        self.step += 1
        constants = module_constants(module)
        new = {k: v for k, v in constants.items() if k not in self._saved}
        for key in constants.keys() & self._saved.keys():
            old, now = self._saved[key], constants[key]
            if old is not now and not (old.shape == now.shape and np.array_equal(old, now)):
                raise CompilationError(f"dump {path.name}: the data of constant \"{key}\" changed since an "
                                       "earlier dump; a pass must give new data a new key")
        if not constants:
            save_hlo_file(module, path)
        elif not self._saved:
            save_hlo_file(module, path, constants_file=self.constants_path)
            self._saved.update(constants)
        else:
            if new:
                self._saved.update(new)
                with open(self.constants_path, "wb") as f:
                    np.savez(f, **{k: storable_array(a) for k, a in self._saved.items()})
            path.write_text(print_module(module, header_attrs={CONSTANTS_ATTR: Quoted(self.constants_path.name)}))
        self.files.append(path)
        return path

    def write_decisions(self, lines: list[str]) -> Path:
        """Write ``fusion_decisions.txt`` (a header line even when no fusion pass ran)."""
        path = self.dir / DECISIONS_FILE
        header = (f"# fusion decisions for {self.prefix}: FUSED/REFUSED kind producer -> consumer: reason"
                  if lines else f"# fusion decisions for {self.prefix}: no fusion was considered")
        path.write_text("\n".join([header, *lines]) + "\n")
        self.files.append(path)
        return path
