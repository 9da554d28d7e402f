"""Precision passes: auto-cast of matmul (or all) operands to bf16/fp8."""
