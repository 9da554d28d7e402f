"""Save a stored .neff again without decoding its program: the bytes ``isa.neff.save`` would write for the
decoded program with some ``meta`` keys changed, written from the stored file's sections.

A compile cache hit (compiler/cache_entries.py) saves the entry's program to ``-o`` with the calling
convention and HLO text in its meta; decoding GPT-2's 36,673 instructions only to encode them again cost
~0.6 s. The strings and instructions sections do not depend on the meta or on where the weights live, so
they are copied as they are; the header is the stored JSON with the new meta (and the weights' new place);
the constants section is written from the mapped side file when the weights are to be inlined.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from isa import neff
from isa import weights as side_weights
from isa.constants import write_atomic
from isa.errors import NeffError


class StoredNeff:
    """A .neff file checked (container, checksum, header) but not decoded, and its mapped side file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.data = self.path.read_bytes()
        except OSError as e:
            raise NeffError(f"{self.path}: cannot read: {e.strerror}") from None
        self.version, self.sections = neff._check_container(self.data)
        if self.version != neff.FORMAT_VERSION:
            raise NeffError(f"{self.path}: format version {self.version}; load and save it instead")
        self.header = neff._decode_header(self.sections[neff.SECTION_HEADER], self.version)
        ref = self.header.get("weights")
        self.constants: dict[str, np.ndarray] | None = None
        if isinstance(ref, dict):
            try:
                expected = {name: (dtype, tuple(shape)) for name, dtype, shape in ref["tensors"]}
                self.side, self.ident = self.path.parent / ref["file"], str(ref["id"])
            except (KeyError, TypeError, ValueError):
                raise NeffError(f"{self.path}: malformed header section: bad 'weights' entry") from None
            self.constants = side_weights.read(self.side, self.ident, expected)

    @property
    def instruction_count(self) -> int:
        return int(neff._U32.unpack_from(self.sections[neff.SECTION_INSTRUCTIONS])[0])

    def save(self, path: str | os.PathLike, meta: Mapping[str, Any], *, weights: str = "auto") -> None:
        """Write the file ``isa.neff.save(program, path, weights=weights)`` writes for this file's program with
        ``meta`` (a value None removes the key) applied to its ``meta``. Only a file with external weights (a
        cache entry's) is rewritten this way."""
        if self.constants is None:
            raise NeffError(f"{self.path}: its weights are inline; load and save it instead")
        if weights not in neff.WEIGHTS_MODES:
            raise NeffError(f"weights={weights!r} is not one of {', '.join(neff.WEIGHTS_MODES)}")
        header = json.loads(json.dumps(self.header))  # a copy
        for key, value in meta.items():
            if value is None:
                header["meta"].pop(key, None)
            else:
                header["meta"][key] = neff._meta_value(key, value)
        path = Path(path)
        nbytes = sum(a.nbytes for a in self.constants.values())
        if weights == "inline" or (weights == "auto" and nbytes <= neff.AUTO_EXTERNAL_BYTES):
            constants, entries = neff._encode_constants_of(self.constants)
            header["constants"] = entries
            del header["weights"]
            flags = 0
        else:
            side = side_weights.side_path(path)
            side_weights.link_or_copy(self.side, side)
            header["weights"]["file"] = side.name
            constants, flags = b"", neff.FLAG_EXTERNAL_WEIGHTS
        write_atomic(path, neff.container(
            [(neff.SECTION_HEADER, json.dumps(header).encode()),
             (neff.SECTION_STRINGS, self.sections[neff.SECTION_STRINGS]),
             (neff.SECTION_INSTRUCTIONS, self.sections[neff.SECTION_INSTRUCTIONS]),
             (neff.SECTION_CONSTANTS, constants)], flags))
