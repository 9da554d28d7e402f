"""Operator fusion: matmul epilogues (kOutput), elementwise/row loops (kLoop), attention (kCustom)."""
