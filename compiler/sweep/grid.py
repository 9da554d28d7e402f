"""The design space of a sweep: models, a grid of option values, and the points of their product.

A grid is written as `KEY=V1,V2,...` words (`fusion=none,greedy,cost scheduler=inorder,list`). Values keep
their text (the CSV column shows what the user typed) and are typed for `compiler.compile` by `typed_value`:
integers, floats, `true`/`false`; anything else stays a string (`none` is the fusion strategy's name, not
None). The points are the product of the models and the grid, models outermost, keys in the order given,
values in the order given: the order of results.csv and of the charts, whatever order the points finish in.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.errors import NeuroncError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$")

# Option names that are not compile options: the model column and the result columns of results.csv.
RESERVED = ("model", "plugins")


class SweepError(NeuroncError):
    """A sweep cannot be set up: a malformed grid, a missing model file, an unreadable results.csv."""


def typed_value(text: str) -> Any:
    """The Python value of a grid value for compiler.compile."""
    lowered = text.lower()
    if text.startswith("[") and text.endswith("]"):  # a list option shipped as JSON (autotune trials)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def parse_grid(words: list[str]) -> dict[str, tuple[str, ...]]:
    """`["fusion=none,greedy", "scheduler=list"]` -> {"fusion": ("none", "greedy"), "scheduler": ("list",)}."""
    grid: dict[str, tuple[str, ...]] = {}
    for word in words:
        key, sep, values = word.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not _KEY.match(key):
            raise SweepError(f"grid entry {word!r}: expected KEY=V1,V2,... (for example fusion=none,greedy,cost)")
        if key in RESERVED:
            raise SweepError(f"grid entry {word!r}: {key!r} is not an option (models are given with --models)")
        if key in grid:
            raise SweepError(f"grid entry {word!r}: option {key!r} is given twice")
        items = tuple(v.strip() for v in values.split(","))
        if not items or any(not v for v in items):
            raise SweepError(f"grid entry {word!r}: an empty value (values are separated by single commas)")
        if len(set(items)) != len(items):
            raise SweepError(f"grid entry {word!r}: a value is repeated")
        grid[key] = items
    return grid


@dataclass(frozen=True)
class ModelSpec:
    """A model file as it ships to a worker: its name (the results' model column), path and source text.

    A worker on this machine imports the file at `path` when its content still hashes to `sha256` (so that
    the file's sibling imports work); a worker elsewhere writes `source` to a folder of its own.
    """

    name: str
    path: str
    source: str
    sha256: str
    entry: str = "get_model"

    @staticmethod
    def from_file(path: str, entry: str = "get_model") -> ModelSpec:
        file = Path(path)
        if not file.is_file():
            raise SweepError(f"model file {path}: no such file")
        if file.suffix != ".py":
            raise SweepError(f"model file {path}: a sweep takes .py model files (get_model() -> (module, inputs))")
        data = file.read_bytes()
        return ModelSpec(file.stem, str(file.resolve()), data.decode(), hashlib.sha256(data).hexdigest(), entry)

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "path": self.path, "source": self.source, "sha256": self.sha256,
                "entry": self.entry}


@dataclass(frozen=True)
class PluginSpec:
    """A plug-in file shipped to the workers, like a model file."""

    path: str
    source: str
    sha256: str

    @staticmethod
    def from_file(path: str) -> PluginSpec:
        file = Path(path)
        if not file.is_file():
            raise SweepError(f"plug-in file {path}: no such file")
        data = file.read_bytes()
        return PluginSpec(str(file.resolve()), data.decode(), hashlib.sha256(data).hexdigest())

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "source": self.source, "sha256": self.sha256}


@dataclass(frozen=True)
class Point:
    """One compilation of the sweep: a model and one value per grid option (as text)."""

    model: str
    options: tuple[tuple[str, str], ...]

    @property
    def key(self) -> tuple[str, ...]:
        """What identifies the point in results.csv (resume compares these)."""
        return (self.model,) + tuple(f"{k}={v}" for k, v in self.options)

    @property
    def label(self) -> str:
        """Short label of the configuration: the values joined by '/' (the keys are the chart's title)."""
        return "/".join(v for _, v in self.options) or "default"

    def compile_kwargs(self, fixed: dict[str, str] | None = None) -> dict[str, Any]:
        merged = dict(fixed or {})
        merged.update(self.options)
        return {k: typed_value(v) for k, v in merged.items()}


@dataclass
class Sweep:
    """Models x grid, plus the options every point shares (`fixed`) and the plug-in files."""

    models: list[ModelSpec]
    grid: dict[str, tuple[str, ...]]
    fixed: dict[str, str] = field(default_factory=dict)
    plugins: list[PluginSpec] = field(default_factory=list)
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        if not names:
            raise SweepError("a sweep needs at least one model file (--models a.py b.py ...)")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SweepError(f"two model files have the same name {dupes[0]!r}: the results' model column is the "
                             f"file's stem, so rename one")
        both = sorted(set(self.grid) & set(self.fixed))
        if both:
            raise SweepError(f"option {both[0]!r} is both in the grid and fixed")

    @property
    def option_names(self) -> list[str]:
        return list(self.grid)

    def points(self) -> list[Point]:
        keys = list(self.grid)
        combos = list(itertools.product(*(self.grid[k] for k in keys)))
        return [Point(m.name, tuple(zip(keys, combo))) for m in self.models for combo in combos]

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def task(self, point: Point) -> dict[str, Any]:
        """The JSON-ready description of one point a worker runs (model and plug-ins travel with it)."""
        return {"model": self.model(point.model).to_json(), "options": dict(point.options),
                "fixed": dict(self.fixed), "plugins": [p.to_json() for p in self.plugins],
                "timeout_s": self.timeout_s}
