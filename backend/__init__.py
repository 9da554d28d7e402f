"""Tiled kernels -> ISA: instruction selection, SBUF/PSUM allocation, multi-engine scheduling."""

from backend.api import BackendResult, compile_module
from backend.options import BackendOptions

__all__ = ["BackendOptions", "BackendResult", "compile_module"]
