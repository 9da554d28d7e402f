"""HLO files on disk: the text plus an ``.npz`` side file holding every large (``{...}``) constant.

The header names the side file relative to the .hlo: ``HloModule NAME, neuronc_constants="FILE.npz"``.
Arrays of types numpy cannot store natively (bf16, fp8) are stored as unsigned ints of the same width and
reinterpreted on load from the constant's declared type. No pickle: ``np.load(..., allow_pickle=False)``.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import numpy as np

from hlo.errors import HloParseError, VerificationError
from hlo.ir import Module, Quoted
from hlo.parser import parse_module, unquote
from hlo.printer import constant_key, is_elided, print_module

CONSTANTS_ATTR = "neuronc_constants"
_HEADER_CONSTANTS = re.compile(r'^HloModule\s+[^,\n]*(?:,[^\n]*?)?\b' + CONSTANTS_ATTR + r'=("(?:\\.|[^"\\])*")',
                               re.M)


def storable_array(array: np.ndarray) -> np.ndarray:
    """The array in a dtype np.save writes without pickle (ml_dtypes types become same-width uints)."""
    if array.dtype.kind == "V" or array.dtype.type.__module__.startswith("ml_dtypes"):
        return array.view(np.dtype(f"u{array.dtype.itemsize}"))
    return array


def module_constants(module: Module) -> dict[str, np.ndarray]:
    """Every constant the printer writes as ``{...}``, by side-file key."""
    result: dict[str, np.ndarray] = {}
    for inst in module.all_instructions():
        if is_elided(inst) and inst.literal is not None:
            key = constant_key(inst)
            if key in result and not np.array_equal(result[key], inst.literal):
                raise VerificationError(f"two constants with different data share the data key \"{key}\" "
                                        f"(%{inst.name} is one)")
            result[key] = inst.literal
    return result


def save_hlo_file(module: Module, path: str | os.PathLike, constants_file: str | os.PathLike | None = None) -> None:
    """Write the module's text to ``path``; with ``constants_file``, also write the large constants there
    and name that file (relative to the .hlo) in the header."""
    path = Path(path)
    header: dict[str, Quoted] = {}
    if constants_file is not None:
        constants_file = Path(constants_file)
        arrays = {key: storable_array(a) for key, a in module_constants(module).items()}
        with open(constants_file, "wb") as f:
            np.savez(f, **arrays)
        rel = os.path.relpath(constants_file.resolve(), path.resolve().parent)
        header[CONSTANTS_ATTR] = Quoted(Path(rel).as_posix())
    path.write_text(print_module(module, header_attrs=header))


def constants_file_of(text: str) -> str | None:
    """The side file named in the header of HLO text, if any."""
    m = _HEADER_CONSTANTS.search(text)
    return unquote(m.group(1)) if m else None


def load_constants(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` side file (never unpickles)."""
    with np.load(path, allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def load_hlo_file(path: str | os.PathLike) -> Module:
    """Read an .hlo file and the constants side file its header names; errors name a missing file or key."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise HloParseError(f"cannot read HLO file {path}: {exc.strerror}") from None
    constants: dict[str, np.ndarray] = {}
    name = constants_file_of(text)
    if name is not None:
        side = path.parent / name
        try:
            constants = load_constants(side)
        except FileNotFoundError:
            raise HloParseError(f"the constants file {side} named in the header of {path} does not exist") \
                from None
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise HloParseError(f"cannot read the constants file {side} named in {path}: {exc}") from None
    return parse_module(text, constants=constants, source=str(path))
