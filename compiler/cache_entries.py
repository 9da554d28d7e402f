"""What the compile cache (compiler/cache.py) stores, and the lookup of a torch model by its trace.

Two kinds of entry:
- a program, keyed by its HLO (``driver._compile_cached``): ``program.neff`` (its weights in the side file
  ``program.neff.safetensors``, memory-mapped when read back) and ``executable.json`` (the HLO text, the pass
  timing and the reports). No pickle.
- an alias, keyed by a torch model's trace (``frontend.trace_key``) or by an HLO input's source (its text, or
  an .hlo file's bytes and its constants side file's): ``alias.json`` names the program entry the capture
  led to, with the model's calling convention (``Signature`` as JSON). A lookup by alias (``trace_lookup``)
  runs before the capture, so a hit skips torch.export or the HLO parser, and the HLO hashing; a miss
  captures as before, and ``trace_store`` records the alias once the program entry is known.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.cache import CompileCache, cache_key
from compiler.executable import Executable, signature_from_json, signature_to_json
from compiler.options import CompileOptions
from compiler.stats import CompileStats
from isa import neff
from isa import weights as side_weights
from isa.constants import isa_dtype_of
from isa.errors import IsaError
from isa.neff_rewrite import StoredNeff
from isa.program import Program

if TYPE_CHECKING:
    from frontend.signature import Signature

log = logging.getLogger("neuronc")

ENTRY_NEFF, ENTRY_JSON, ENTRY_ALIAS = "program.neff", "executable.json", "alias.json"
_ENTRY_KEY = re.compile(r"(?:hit|miss) ([0-9a-f]{64})")  # the program entry in CompileStats.cache


def cache_for(options: CompileOptions) -> CompileCache | None:
    """The cache a compile uses: none with --no-cache, or with --dump-dir (a hit would write no dumps)."""
    return CompileCache.default() if options.cache and options.dump_dir is None else None


def write_entry(exe: Executable, folder: Path) -> None:
    """A program entry: the program (weights in a side file, memory-mapped when read back) and the
    Executable's texts as JSON (no pickle)."""
    neff.save(exe.program, folder / ENTRY_NEFF, weights="external")
    (folder / ENTRY_JSON).write_text(json.dumps({"hlo": exe.hlo, "pass_timing": exe.pass_timing,
                                                 "reports": exe.reports}))


def map_entry_weights(program: Program, folder: Path) -> None:
    """From now on the program's weights are the entry's read-only memory-mapped file (less memory;
    saving the program to -o links that file instead of hashing and writing the weights again)."""
    try:
        stored = neff.read_weights_ref(folder / ENTRY_NEFF)
        if stored is None:
            return
        expected = {name: (isa_dtype_of(a).name, tuple(np.shape(a))) for name, a in program.constants.items()}
        mapped = side_weights.read(folder / stored[0], stored[1], expected)
    except (OSError, IsaError):
        return  # keep the arrays in memory (e.g. another process stored this key with other weights)
    program.constants = mapped


class StoredExecutable(Executable):
    """The Executable of a program entry, its program decoded when first used. Saved before that (``neuronc
    compile``'s hit), the entry's .neff is rewritten with the new meta instead of decoded and encoded again
    (isa/neff_rewrite.py: the same bytes; GPT-2: ~0.6 s less). The container, its checksum, its header and
    the weights file were checked when it was read."""

    def __init__(self, stored: StoredNeff, **fields: Any) -> None:
        self._stored: StoredNeff | None = stored
        self._program: Program | None = None
        super().__init__(program=None, **fields)  # type: ignore[arg-type] - decoded on first use

    @property  # type: ignore[override]
    def program(self) -> Program:
        if self._program is None:
            assert self._stored is not None
            self._program = neff.decode(self._stored.data, weights_dir=self._stored.path.parent)
        return self._program

    @program.setter
    def program(self, value: Program | None) -> None:
        self._program = value
        if value is not None:
            self._stored = None

    def summary(self) -> tuple[str, int, int, int]:
        if self._program is not None or self._stored is None:
            return super().summary()
        header = self._stored.header
        return (header["target"], self._stored.instruction_count, len(header["inputs"]), len(header["outputs"]))

    def save(self, path: str | os.PathLike, *, weights: str = "auto") -> None:
        if self._program is not None or self._stored is None:
            return super().save(path, weights=weights)
        stored = self._stored
        if self.compile_stats is None:
            stored.save(path, self.save_meta(), weights=weights)
            return
        with self.compile_stats.phase(".neff write", "output"):
            stored.save(path, self.save_meta(), weights=weights)


def read_entry(folder: Path) -> Executable | None:
    """The Executable of a program entry, or None when it cannot be read (then compiled again)."""
    try:
        stored = StoredNeff(folder / ENTRY_NEFF)
        texts = json.loads((folder / ENTRY_JSON).read_text())
        return StoredExecutable(stored, hlo=str(texts["hlo"]), pass_timing=str(texts["pass_timing"]),
                                reports={str(k): str(v) for k, v in texts["reports"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IsaError) as e:
        log.warning("neuronc: compile cache entry %s unreadable (%s); compiling again", folder, e)
        return None


def trace_lookup(digest_of: Callable[[], str | None], capture: str, options: CompileOptions, target_machine: Any,
                 stats: CompileStats, by: str = "trace") -> Executable | tuple[CompileCache, str] | None:
    """Look a model up by its trace (``by``: or an HLO input by its source text) before capturing it:
    ``digest_of()`` is its digest (None: not keyable), ``capture`` how it would be captured (part of the key).
    Returns the Executable on a hit (with its calling convention), else (cache, key) for ``trace_store``, or
    None."""
    cache = cache_for(options)
    if cache is None:
        return None
    with stats.phase(f"cache lookup ({by})", "cache"):
        digest = digest_of()
        if digest is None:
            return None
        key = cache_key(f"trace {capture} {digest}", (), options.semantic(), target_machine.data)
        entry, exe, target = cache.get(key), None, None
        alias = _read_alias(entry) if entry is not None else None
        if alias is not None:
            target = cache.get(alias[0])
            exe = read_entry(target) if target is not None else None
    if exe is None or alias is None:
        if entry is not None:
            cache.discard(key)  # unreadable here, or its program is gone: stored again after the capture
        return cache, key
    exe.signature = alias[1]
    stats.cache = f"hit {key[:16]} by {by} ({target})"
    log.info("neuronc: compile cache hit %s by %s (%s)", key[:16], by, target)
    exe.compile_stats = stats
    return exe


def trace_store(lookup: tuple[CompileCache, str], exe: Executable) -> None:
    """Record that the trace key of ``lookup`` leads to the program entry ``exe`` was just stored in or
    read from (named by its compile_stats). Nothing is stored when the program was not (a full cache)
    or when the calling convention holds what JSON cannot."""
    cache, key = lookup
    target = _ENTRY_KEY.match(exe.compile_stats.cache if exe.compile_stats is not None else "")
    signature = signature_to_json(exe.signature)
    if target is None or (exe.signature is not None and signature is None):
        return
    try:
        cache.put(key, lambda folder: (folder / ENTRY_ALIAS).write_text(
            json.dumps({"entry": target.group(1), "signature": signature})))
    except OSError as e:
        log.warning("neuronc: compile cache: cannot store %s: %s", key[:16], e)


def _read_alias(folder: Path) -> tuple[str, Signature | None] | None:
    try:
        data = json.loads((folder / ENTRY_ALIAS).read_text())
        text = data["signature"]
        signature = signature_from_json(text) if text is not None else None
        if text is not None and signature is None:
            return None  # e.g. its output class is not imported in this process: capture instead
        return str(data["entry"]), signature
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("neuronc: compile cache entry %s unreadable (%s); capturing again", folder, e)
        return None
