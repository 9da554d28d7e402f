"""Golden HLO files of the pass tests: ``<case>.in.hlo`` -> ``<case>.out.hlo`` (see harness.py)."""
