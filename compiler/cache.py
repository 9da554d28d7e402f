"""The compile cache: compiled programs kept between processes, like neuronx-cc's cache and
inductor's FX graph cache.

The key is the SHA-256 of the canonical HLO text of the module as imported (before any pass), the
XXH3-128 of each of its large constants (the text elides them), the options that change the program, the
target's description and the compiler's version (``compiler_version``: the package version plus a
hash of the compiler's own source files, so editing the compiler invalidates old entries).

The cache lives in ``$NEURONC_CACHE_DIR``, else ``$XDG_CACHE_HOME/neuronc``, else
``~/.cache/neuronc``; ``NEURONC_CACHE_SIZE_MB`` bounds it (default 4096): after a store the least
recently used entries go until it fits. An entry is a folder ``<key[:2]>/<key>/`` whose files the
caller writes (compiler/cache_entries.py: a program - ``program.neff``, its weights side file,
``executable.json`` - or a trace alias naming one, ``alias.json``, keyed by ``frontend.trace_key``; no
pickle).
Writes are atomic: an entry is built in a temporary folder and renamed into place, so a reader never
sees half an entry and two processes storing the same key both succeed (the second finds it there).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

ENV_DIR = "NEURONC_CACHE_DIR"
ENV_SIZE = "NEURONC_CACHE_SIZE_MB"
ENV_VERSION = "NEURONC_CACHE_VERSION"
DEFAULT_SIZE_MB = 4096
FORMAT = 1  # of an entry's files; part of the key
STALE_TMP_S = 3600  # a temporary entry folder older than this was left by a process that died
_SOURCE_PACKAGES = ("hlo", "frontend", "backend", "compiler", "isa")  # whose sources the version hashes


def default_root() -> Path:
    """``$NEURONC_CACHE_DIR``, else ``$XDG_CACHE_HOME/neuronc``, else ``~/.cache/neuronc``."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "neuronc"


def default_limit() -> int:
    """The size bound in bytes, from ``NEURONC_CACHE_SIZE_MB`` (default 4096 MiB)."""
    text = os.environ.get(ENV_SIZE, "")
    try:
        mb = float(text) if text else DEFAULT_SIZE_MB
    except ValueError:
        raise ValueError(f"{ENV_SIZE}={text!r} is not a number of MiB") from None
    return int(mb * 2**20)


def compiler_version() -> str:
    """The package version and a hash of every .py/.lark/.json file of the compiler's packages, or
    ``$NEURONC_CACHE_VERSION`` when set: a test that compiles in two processes pins it, so that a source
    edited between them (by a developer working meanwhile) does not turn its hit into a miss."""
    return os.environ.get(ENV_VERSION) or _source_version()


@lru_cache(maxsize=1)
def _source_version() -> str:
    try:
        version = metadata.version("neuronc")
    except metadata.PackageNotFoundError:
        version = "unknown"
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(version.encode())
    for package in _SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in (".py", ".lark", ".json") and path.is_file():
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return f"{version}+{digest.hexdigest()[:16]}"


def cache_key(hlo_text: str, constants: Iterable[np.ndarray], options: Mapping[str, Any],
              target: Mapping[str, Any], version: str | None = None) -> str:
    """The key of one compilation (hex SHA-256); see the module docstring."""
    digest = hashlib.sha256()
    head = {"format": FORMAT, "version": version or compiler_version(), "options": dict(options),
            "target": target}
    digest.update(json.dumps(head, sort_keys=True, default=str).encode())
    digest.update(hlo_text.encode())
    for array in constants:  # each by its XXH3-128 (20x SHA-256's speed; see frontend/trace_key.py)
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(xxhash.xxh3_128(memoryview(array.reshape(-1).view(np.uint8))).digest())
    return digest.hexdigest()


@dataclass
class CompileCache:
    root: Path
    limit_bytes: int

    @classmethod
    def default(cls) -> CompileCache:
        return cls(default_root(), default_limit())

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Path | None:
        """The folder of entry ``key`` if it is stored (its use time is updated), else None."""
        path = self.entry(key)
        if not (path / "complete").is_file():
            return None
        try:
            os.utime(path)
        except OSError:
            pass  # a read-only cache still serves hits
        return path

    def discard(self, key: str) -> None:
        """Remove entry ``key`` (an unreadable one, so that the compile that follows can store it again)."""
        path = self.entry(key)
        if path.is_dir():
            tomb = path.with_name(f".{key[:16]}.{os.getpid()}.{time.monotonic_ns()}.gone")
            try:
                os.rename(path, tomb)  # atomic: a reader sees the entry whole or not at all
            except OSError:
                return
            shutil.rmtree(tomb, ignore_errors=True)

    def put(self, key: str, write: Callable[[Path], None]) -> Path:
        """Store entry ``key``: ``write(folder)`` fills a temporary folder, which is renamed into place.
        Returns the entry's folder. Then evicts least recently used entries beyond the size bound."""
        final = self.entry(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=final.parent))
        try:
            write(tmp)
            (tmp / "complete").write_text(f"{time.time()}\n")
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "complete").is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process stored it first
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.evict(keep=key)
        return final

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, folder) of every complete entry."""
        found = []
        if not self.root.is_dir():
            return found
        for shard in self.root.iterdir():
            if not shard.is_dir() or shard.name.startswith("."):
                continue
            for path in shard.iterdir():
                if path.name.startswith("."):
                    _remove_if_stale(path)
                    continue
                if not (path / "complete").is_file():
                    continue
                try:
                    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
                    found.append((path.stat().st_mtime, size, path))
                except OSError:
                    continue  # removed meanwhile by another process
        return found

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self, keep: str | None = None) -> list[Path]:
        """Remove least recently used entries (never ``keep``) until the cache fits its bound."""
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, path in entries:
            if total <= self.limit_bytes:
                break
            if path.name == keep:
                continue
            shutil.rmtree(path, ignore_errors=True)
            total -= size
            removed.append(path)
        return removed

    def clear(self) -> None:
        if self.root.is_dir():
            shutil.rmtree(self.root, ignore_errors=True)


def _remove_if_stale(path: Path) -> None:
    try:
        if time.time() - path.stat().st_mtime > STALE_TMP_S:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass
