"""Plug-in files: a user's Python file that registers strategies (docs/plugins.md).

`load_plugins(["my_sched.py"])` imports each file once per process (again only if its content changed);
what it registers with the decorators of backend.registry (schedulers, tile policies, memory planners) and
compiler.passes.fusion.registry (fusion strategies) can then be chosen by name. `neuronc compile --plugin
FILE`, `compiler.compile(..., plugins=[FILE])` and `neuronc sweep --plugin FILE` call it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from backend.registry import MEMORY_PLANNERS, SCHEDULERS, TILE_POLICIES, Registry
from compiler.errors import NeuroncError
from compiler.passes.fusion.registry import FUSION_STRATEGIES

REGISTRIES: tuple[Registry, ...] = (SCHEDULERS, TILE_POLICIES, MEMORY_PLANNERS, FUSION_STRATEGIES)


class PluginError(NeuroncError):
    """A plug-in file is missing, fails to import, or registers a name that is taken."""


@dataclass(frozen=True)
class LoadedPlugin:
    path: str
    sha256: str
    registered: tuple[tuple[str, str], ...]  # (kind, name) of what it registered


_loaded: dict[str, LoadedPlugin] = {}


def load_plugins(paths: list[str | os.PathLike] | tuple[str | os.PathLike, ...]) -> list[LoadedPlugin]:
    """Import every plug-in file (once per process and content) and return what each registered."""
    return [load_plugin(p) for p in paths]


def load_plugin(path: str | os.PathLike) -> LoadedPlugin:
    file = Path(path)
    if not file.is_file():
        raise PluginError(f"plug-in {os.fspath(path)}: no such file")
    if file.suffix != ".py":
        raise PluginError(f"plug-in {os.fspath(path)}: expected a Python file (.py)")
    resolved = str(file.resolve())
    data = file.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    known = _loaded.get(resolved)
    if known is not None and known.sha256 == digest:
        return known
    if known is not None:  # the file changed since it was loaded: its new version replaces the old one
        for kind, entry in known.registered:
            _registry(kind).unregister(entry)
        del _loaded[resolved]
    before = {(r.kind, n) for r in REGISTRIES for n in r.names()}
    name = f"neuronc_plugin_{file.stem}_{digest[:12]}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise PluginError(f"plug-in {file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling-free introspection look the module up by name
    try:
        spec.loader.exec_module(module)
    except NeuroncError as e:
        sys.modules.pop(name, None)
        raise PluginError(f"plug-in {file}: {e}{_where(e, file)}") from None
    except Exception as e:
        sys.modules.pop(name, None)
        raise PluginError(f"plug-in {file}: importing it raised {type(e).__name__}: {e}{_where(e, file)}") from None
    after = [(r.kind, n) for r in REGISTRIES for n in r.names()]
    registered = tuple(x for x in after if x not in before)
    if not registered:
        raise PluginError(f"plug-in {file}: registers nothing (use backend.registry.register_scheduler, "
                          f"register_tile_policy, register_memory_planner or "
                          f"compiler.passes.fusion.registry.register_fusion_strategy)")
    for kind, entry in registered:
        _registry(kind).set_origin(entry, f"plug-in {file}")
    loaded = LoadedPlugin(resolved, digest, registered)
    _loaded[resolved] = loaded
    return loaded


def plugin_digests(paths: tuple[str, ...] | list[str]) -> list[str]:
    """The sha256 of each plug-in file's content (the compile cache's key: the code, not the path)."""
    return [load_plugin(p).sha256 for p in paths]


def _registry(kind: str) -> Registry:
    return next(r for r in REGISTRIES if r.kind == kind)


def _where(error: BaseException, file: Path) -> str:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == file]
    return f" (at {file}:{frames[-1].lineno})" if frames else ""
