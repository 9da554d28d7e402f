"""The weights side file of a .neff: the program's constants in safetensors format, memory-mapped
when loaded, so that loading, running and caching a program do not copy its weights.

``model.neff`` keeps its weights in ``model.neff.safetensors`` (``side_path``). The file is plain
safetensors (any safetensors reader opens it: torch, numpy, the Rust crate); each constant is stored
under its tensor name with its own dtype (bf16 and fp8 as safetensors' BF16/F8_E4M3/F8_E5M2). Its
metadata holds ``neuronc.weights_id``, the XXH3-128 of the constants (``weights_id``), which the
.neff header records too: a side file of another compile is refused by name instead of giving wrong
numbers. Loading maps the file read-only (``np.memmap``) and checks names, dtypes, shapes and the id;
``verify=True`` also hashes the data again.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import struct
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from isa.dtypes import DTYPES
from isa.errors import NeffError

SUFFIX = ".safetensors"
ID_KEY = "neuronc.weights_id"
ID_ALGORITHM = "xxh3-128"
_HEADER_LENGTH = struct.Struct("<Q")
# safetensors' header dtype codes -> the ISA dtype names of isa.dtypes
FILE_DTYPES = {"F32": "f32", "BF16": "bf16", "F16": "f16", "F8_E4M3": "fp8e4", "F8_E5M2": "fp8e5",
               "I32": "i32", "I8": "i8", "U8": "u8", "I16": "i16", "U16": "u16", "U32": "u32", "BOOL": "pred",
               "I64": "i64", "U64": "u64"}

_FILE_CODES = {np.dtype(DTYPES[name].numpy): code for code, name in FILE_DTYPES.items()}
DIRECT_MIN_BYTES = 64 << 20  # side files from this size are written with O_DIRECT
_DIRECT_STAGE, _DIRECT_BLOCK = 8 << 20, 4096


# Side files read recently: id(constants dict) -> (the dict, id of each array, file, weights id). A
# program whose constants are still exactly those read-only mapped arrays is saved by linking (or
# copying) the file instead of hashing and writing its weights again (a cache hit saved to -o).
_KNOWN: OrderedDict[int, tuple[Mapping[str, np.ndarray], dict[str, int], Path, str]] = OrderedDict()
_KNOWN_MAX = 8


def known_file(constants: Mapping[str, np.ndarray]) -> tuple[Path, str] | None:
    """(side file, weights id) when ``constants`` are the unchanged arrays ``read`` mapped from it."""
    entry = _KNOWN.get(id(constants))
    if entry is None or entry[0] is not constants or entry[1] != {k: id(v) for k, v in constants.items()}:
        return None
    return (entry[2], entry[3]) if entry[2].exists() else None


def link_or_copy(source: Path, path: str | os.PathLike) -> None:
    """Make ``path`` a hard link to ``source`` (a copy across file systems), atomically."""
    path = Path(path)
    if path.exists() and path.samefile(source):
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def side_path(neff_path: str | os.PathLike) -> Path:
    """``model.neff`` -> ``model.neff.safetensors`` (same folder)."""
    path = Path(neff_path)
    return path.with_name(path.name + SUFFIX)


def weights_id(constants: Mapping[str, np.ndarray], algorithm: str = ID_ALGORITHM) -> str:
    """``xxh3-128:`` and the XXH3-128 over every constant's name, dtype, shape and bytes, in order (Llama's
    2.7 GB: 0.1 s; SHA-256 took 1.5-2.9 s). ``algorithm="sha256"`` gives the plain hex SHA-256 of the same
    bytes, the id of files written before (still verified)."""
    digest = hashlib.sha256() if algorithm == "sha256" else xxhash.xxh3_128()
    for name, array in constants.items():
        array = np.ascontiguousarray(array)
        digest.update(json.dumps([name, array.dtype.name, list(array.shape)]).encode())
        digest.update(memoryview(array.reshape(-1).view(np.uint8)))
    return digest.hexdigest() if algorithm == "sha256" else f"{ID_ALGORITHM}:{digest.hexdigest()}"


def _id_algorithm(ident: str) -> str:
    """The hash an id was made with: ``xxh3-128:HEX``, or a bare SHA-256 hex digest (files written before)."""
    return ID_ALGORITHM if ident.startswith(f"{ID_ALGORITHM}:") else "sha256"


def write(path: str | os.PathLike, constants: Mapping[str, np.ndarray], ident: str) -> None:
    """Write ``constants`` to ``path`` as safetensors, atomically (a temporary file in the same folder,
    then renamed: a reader never sees a partial file, and two writers of the same file both succeed).

    The tensors are laid out largest element first (each stays aligned to its element size), the header
    padded to 8 bytes as the safetensors library does. Above DIRECT_MIN_BYTES the bytes go to the disk with
    O_DIRECT through one reused aligned buffer: the kernel's page cache copy of a large new file cost ~2 CPU
    s per GB here (Llama's 2.7 GB side file: ~5 CPU s, ~10 s wall) against ~0.15 through O_DIRECT. A file
    system without O_DIRECT is written the ordinary way."""
    path = Path(path)
    order = sorted(constants, key=lambda name: -np.dtype(constants[name].dtype).itemsize)
    header: dict[str, Any] = {"__metadata__": {ID_KEY: ident}}
    offset = 0
    for name in order:
        array = constants[name]
        code = _FILE_CODES.get(np.dtype(array.dtype))
        if code is None:
            raise NeffError(f"constant {name!r}: dtype {array.dtype} has no safetensors code")
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pieces = [_HEADER_LENGTH.pack(len(text)) + text, *(constants[name] for name in order)]
    total = len(pieces[0]) + offset
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        if total < DIRECT_MIN_BYTES or not _write_direct(tmp, pieces, total):
            with open(tmp, "wb", buffering=0) as f:
                for piece in pieces:
                    _write_all(f.fileno(), _bytes_of(piece))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _bytes_of(piece: bytes | np.ndarray) -> memoryview:
    if isinstance(piece, bytes):
        return memoryview(piece)
    return memoryview(np.ascontiguousarray(piece).reshape(-1).view(np.uint8))


def _write_all(fd: int, data: memoryview) -> None:
    while len(data):
        data = data[os.write(fd, data):]


def _write_direct(tmp: str, pieces: list, total: int) -> bool:
    """Write ``pieces`` to ``tmp`` with O_DIRECT (False when the file system refuses it: nothing written)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | flag)
    except OSError:
        return False
    stage = mmap.mmap(-1, _DIRECT_STAGE)  # page-aligned, as O_DIRECT wants
    try:
        fill = 0
        for piece in pieces:
            data = _bytes_of(piece)
            while len(data):
                n = min(_DIRECT_STAGE - fill, len(data))
                stage[fill:fill + n] = data[:n]
                fill, data = fill + n, data[n:]
                if fill == _DIRECT_STAGE:
                    _write_all(fd, memoryview(stage))
                    fill = 0
        if fill:
            padded = fill + (-fill % _DIRECT_BLOCK)
            stage[fill:padded] = bytes(padded - fill)
            _write_all(fd, memoryview(stage)[:padded])
        os.ftruncate(fd, total)
    except OSError:
        os.ftruncate(fd, 0)  # e.g. an alignment the file system wants larger: written the ordinary way
        return False
    finally:
        os.close(fd)
        stage.close()
    return True


def read(path: str | os.PathLike, ident: str, expected: Mapping[str, tuple[str, tuple[int, ...]]], *,
         verify: bool = False) -> dict[str, np.ndarray]:
    """The constants of the side file at ``path``, as read-only arrays over one memory map.

    ``expected``: name -> (ISA dtype, shape) as the .neff header declares them; ``ident`` the id
    the .neff recorded. Raises NeffError naming the file for a missing, foreign or damaged file.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(_HEADER_LENGTH.size)
            if len(head) < _HEADER_LENGTH.size:
                raise NeffError(f"{path}: weights file truncated ({size} bytes)")
            (length,) = _HEADER_LENGTH.unpack(head)
            if length > size - _HEADER_LENGTH.size:
                raise NeffError(f"{path}: not a safetensors file (header length {length}, file {size} bytes)")
            header = json.loads(f.read(length))
    except FileNotFoundError:
        raise NeffError(f"{path}: the weights file of this .neff is missing (it is written beside the "
                        f".neff; copy both, or compile with inlined weights)") from None
    except OSError as e:
        raise NeffError(f"{path}: cannot read the weights file: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise NeffError(f"{path}: not a safetensors file (its header is not JSON)") from None
    found = header.pop("__metadata__", {}) or {}
    if found.get(ID_KEY) != ident:
        raise NeffError(f"{path}: these weights belong to another compile (id {found.get(ID_KEY)!r}, the .neff "
                        f"expects {ident!r})")
    base = _HEADER_LENGTH.size + length
    data = np.memmap(path, dtype=np.uint8, mode="r") if size > base else np.zeros(0, dtype=np.uint8)
    constants: dict[str, np.ndarray] = {}
    for name, (dtype, shape) in expected.items():
        entry = header.get(name)
        if entry is None:
            raise NeffError(f"{path}: no tensor {name!r} in the weights file")
        got = FILE_DTYPES.get(entry.get("dtype"))
        start, end = entry.get("data_offsets", (0, -1))
        if got != dtype or tuple(entry.get("shape", ())) != tuple(shape):
            raise NeffError(f"{path}: tensor {name!r} is {entry.get('dtype')}{entry.get('shape')}, the .neff "
                            f"declares {dtype}{list(shape)}")
        nbytes = DTYPES[dtype].itemsize * int(np.prod(shape, dtype=np.int64))
        if end - start != nbytes or base + end > size:
            raise NeffError(f"{path}: tensor {name!r} has bytes [{start}, {end}) of a file of {size - base} "
                            f"data bytes; {nbytes} expected")
        constants[name] = data[base + start:base + end].view(DTYPES[dtype].numpy).reshape(shape)
    if verify and weights_id(constants, _id_algorithm(ident)) != ident:
        raise NeffError(f"{path}: the weights' data does not match its id (the file is damaged)")
    _KNOWN[id(constants)] = (constants, {k: id(v) for k, v in constants.items()}, path.resolve(), ident)
    while len(_KNOWN) > _KNOWN_MAX:
        _KNOWN.popitem(last=False)
    return constants
