"""Hardware-agnostic simplification: canonicalization, constant folding, algebraic rewrites, CSE, DCE."""
