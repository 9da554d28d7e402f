"""neuronc, as users meet it: ``compiler.compile``, ``compiler.load`` and the ``Executable`` they return.

The package is the top layer: it imports the IR (hlo), the frontend, the backend and the machine (isa); nothing
below imports it back.
"""

from compiler.driver import Executable, compile, load

__all__ = ["compile", "load", "Executable"]
