"""Differential fuzzing of the whole compiler (issue 8).

Random HLO programs (generate.py, driven by a Chooser from choices.py) are compiled at -O0..-O3 for trn1
and trn2, run on the emulator in checked mode and compared with the reference interpreter and eager torch
(reference.py, harness.py). Failures are shrunk over the generator's choice sequence (minimize.py) and
saved as .hlo reproducers under tests/regressions/. benchmarks/fuzz.py runs long campaigns.
"""
