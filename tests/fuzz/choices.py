"""Where the generator's random decisions come from.

The generator asks a Chooser for bounded integers only, so that one generator serves three drivers:
RandomChooser (campaigns: one seed per case), HypothesisChooser (the CI test: hypothesis draws and shrinks)
and ReplayChooser (our own shrinker replays an edited choice sequence). Every chooser records what it
returned in ``choices``: replaying that list reproduces the program exactly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class Chooser:
    """Base class: subclasses implement ``_draw(lo, hi)``; 0-based "simplest" values are the low ones."""

    def __init__(self) -> None:
        self.choices: list[int] = []
        self.spans: list[int] = []  # positions in `choices` where the generator started a new op

    def mark(self) -> None:
        """Note that the choices from here on build one op: the shrinker tries deleting such spans whole."""
        self.spans.append(len(self.choices))

    def _draw(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def integer(self, lo: int, hi: int) -> int:
        """A uniform-ish integer in [lo, hi] (shrinks toward lo)."""
        if hi <= lo:
            return lo
        value = self._draw(lo, hi)
        self.choices.append(value - lo)
        return value

    def choice(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]

    def boolean(self, percent_true: int = 50) -> bool:
        """True with about ``percent_true`` % probability (shrinks toward False)."""
        return self.integer(0, 99) >= 100 - percent_true

    def weighted(self, weights: Sequence[tuple[T, int]]) -> T:
        """One item, with probability proportional to its integer weight (shrinks toward the first)."""
        live = [(item, w) for item, w in weights if w > 0]
        if not live:
            raise ValueError("weighted(): every weight is zero")
        ticket = self.integer(0, sum(w for _, w in live) - 1)
        for item, w in live:
            if ticket < w:
                return item
            ticket -= w
        return live[-1][0]  # pragma: no cover - unreachable

    def subset(self, items: Sequence[T], min_size: int = 0) -> list[T]:
        """A sub-list of ``items`` (order kept), at least ``min_size`` long."""
        picked = [x for x in items if self.boolean()]
        rest = [x for x in items if x not in picked]
        while len(picked) < min_size and rest:
            picked.append(rest.pop(self.integer(0, len(rest) - 1)))
        return [x for x in items if x in picked]


class RandomChooser(Chooser):
    def __init__(self, seed: Any):
        super().__init__()
        self.rng = random.Random(seed)

    def _draw(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class ReplayChooser(Chooser):
    """Replays a recorded sequence (each value taken modulo the current range; the low end once exhausted)."""

    def __init__(self, recorded: Sequence[int]):
        super().__init__()
        self.recorded = list(recorded)
        self.position = 0

    def _draw(self, lo: int, hi: int) -> int:
        if self.position >= len(self.recorded):
            return lo
        offset = self.recorded[self.position] % (hi - lo + 1)
        self.position += 1
        return lo + offset


class HypothesisChooser(Chooser):
    """Draws from a hypothesis ``st.data()`` object, so hypothesis generates and shrinks the program."""

    def __init__(self, data: Any):
        super().__init__()
        self.data = data

    def _draw(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        return self.data.draw(st.integers(lo, hi))
