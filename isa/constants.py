"""The constants side file of the text form: an ``.npz`` holding the data of a program's const tensors.

Each array is stored under ``NAME::DTYPE``; bf16 and fp8 arrays are stored as their raw bits
(uint16/uint8) since numpy's npz cannot describe them. Read back with ``allow_pickle=False``.
Also home to the helpers the text and binary forms share (``constant_problems``, ``write_atomic``).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from isa.dtypes import DTYPES, DType
from isa.errors import ProgramError
from isa.program import Program, TensorDecl

CONSTANTS_KEY_SEP = "::"


def read_constants(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Arrays of a constants side file, by tensor name. Raises ValueError or OSError."""
    constants: dict[str, np.ndarray] = {}
    npz = np.load(path, allow_pickle=False)
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError("not an .npz archive")
    with npz:
        for key in npz.files:
            name, sep, dtype_name = key.rpartition(CONSTANTS_KEY_SEP)
            if not sep or dtype_name not in DTYPES:
                raise ValueError(f"entry {key!r} is not NAME{CONSTANTS_KEY_SEP}DTYPE")
            want = DTYPES[dtype_name].numpy
            array = npz[key]
            if array.dtype != want:
                if array.dtype != _bits_dtype(DTYPES[dtype_name]):
                    raise ValueError(f"entry {key!r} holds {array.dtype} data")
                array = array.view(want)
            constants[name] = array
    return constants


def write_constants(program: Program, path: str | os.PathLike) -> None:
    """Write ``program.constants`` to an .npz side file (atomically). Raises ProgramError."""
    for name, problem in constant_problems(program.tensors, program.constants):
        raise ProgramError(f"constant {name!r}: {problem}")
    arrays = {}
    for name, array in program.constants.items():
        dt = isa_dtype_of(array)
        array = np.require(array, requirements="C")
        arrays[f"{name}{CONSTANTS_KEY_SEP}{dt.name}"] = array.view(_bits_dtype(dt))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(Path(path), buffer.getvalue())


def constant_problems(tensors: Mapping[str, TensorDecl],
                      constants: Mapping[str, np.ndarray]) -> Iterator[tuple[str, str]]:
    """(name, problem) for each constant that is not a declared const tensor or differs from it."""
    for name, array in constants.items():
        decl = tensors.get(name)
        if decl is None or decl.kind != "const":
            yield name, "is not a declared const tensor"
            continue
        dt = isa_dtype_of(array)
        if dt is None or dt.name != decl.dtype or tuple(array.shape) != decl.shape:
            got = f"{dt.name if dt else array.dtype}{list(array.shape)}"
            yield name, f"data is {got} but the tensor is declared {decl.dtype}{list(decl.shape)}"


def isa_dtype_of(array: np.ndarray) -> DType | None:
    """The ISA dtype whose numpy dtype is ``array.dtype`` (None if there is none)."""
    return next((d for d in DTYPES.values() if d.numpy == array.dtype), None)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path`` and rename it over ``path`` (no partial file)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp creates the file 0600; give it the permissions a plain open() would have
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _bits_dtype(dt: DType) -> np.dtype:
    """How an array of ``dt`` is stored in npz: itself if numpy knows it, else its raw bits."""
    return dt.numpy if dt.numpy.isbuiltin == 1 else np.dtype(f"<u{dt.itemsize}")


