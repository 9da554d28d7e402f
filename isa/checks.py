"""The emulator's levels of checking (``--checks``), apart from the emulator so that a command line can offer
them without importing it."""

CHECKS = ("off", "rules", "full")  # none / machine rules at decode / + races, uninitialized reads
