"""The cyclic garbage collector around work that makes many long-lived objects (a loaded program, its decode,
an assembled program's parse tree, a compile, a run).

Loading GPT-2 small's .neff makes ~250,000 objects and decoding it ~330,000 more, all living as long as the
program or emulator and forming no cycles. With the collector running, the young collections while they are
made walk them again and again, and a full collection triggered on the way walks everything the process holds
(after ``import torch``: 0.2-0.4 s of a 0.15 s load). ``long_lived()`` pauses the collector and, at the end,
moves what was made to the oldest generation without scanning it; ``paused()`` only pauses it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Run the body with the collector paused (its state restored after, also on an error)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def long_lived() -> Iterator[None]:
    """Run the body with the collector paused, its objects then moved to the oldest generation unscanned.

    The young generations are collected first (``gc.collect(1)``), so nothing else is promoted: the
    ``gc.freeze(); gc.unfreeze()`` at the end moves every tracked object to the oldest generation, which then
    holds what the body made. Moved that way they do not count towards the next full collection's trigger.
    A process that froze objects itself (``gc.freeze``) keeps the plain pause; so does a nested use."""
    was_enabled = gc.isenabled()
    promote = was_enabled and gc.get_freeze_count() == 0
    if promote:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if promote:
            gc.freeze()  # every tracked object to the permanent generation, then all of it to the oldest
            gc.unfreeze()
        if was_enabled:
            gc.enable()
