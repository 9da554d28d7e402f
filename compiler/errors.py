"""The compiler's typed errors, as users import them (``compiler.errors``); they are defined with the IR."""

from hlo.errors import (
    CompilationError,
    HloParseError,
    LoweringError,
    ModelLoadError,
    NeuroncError,
    UnsupportedOpError,
    VerificationError,
)

__all__ = ["CompilationError", "HloParseError", "LoweringError", "ModelLoadError", "NeuroncError",
           "UnsupportedOpError", "VerificationError"]
