"""Load the MODEL argument of `neuronc compile`: a .py file, a .pt2 ExportedProgram or a .hlo file."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from hlo.errors import ModelLoadError

MODEL_SUFFIXES = (".py", ".pt2", ".hlo")


def load_model_file(path: str, entry: str = "get_model") -> tuple[Any, tuple, dict]:
    """Return (model, example_inputs, example_kwargs); for .hlo, (path, (), {}) so that the driver parses it."""
    file = Path(path)
    if file.is_dir():
        raise ModelLoadError(f"{path} is a directory, not a model file ({', '.join(MODEL_SUFFIXES)})")
    if not file.is_file():
        raise ModelLoadError(f"{path}: no such file")
    suffix = file.suffix.lower()
    if suffix == ".hlo":
        return str(file), (), {}
    if suffix == ".pt2":
        return _load_exported_program(file), (), {}
    if suffix == ".py":
        return _load_python_model(file, entry)
    raise ModelLoadError(f"{path}: unknown model format {suffix!r}; expected one of {', '.join(MODEL_SUFFIXES)}")


def _load_exported_program(file: Path) -> Any:
    import torch

    try:
        program = torch.export.load(str(file))
    except Exception as e:  # torch raises many types for a bad archive
        raise ModelLoadError(f"{file}: not a saved torch.export ExportedProgram ({type(e).__name__}: {e})") from None
    return program


def _load_python_model(file: Path, entry: str) -> tuple[Any, tuple, dict]:
    spec = importlib.util.spec_from_file_location(f"neuronc_model_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        raise ModelLoadError(f"{file}: importing it called sys.exit({e.code!r}){_user_frame(e, file)}") from None
    except Exception as e:
        raise ModelLoadError(f"{file}: importing it raised {type(e).__name__}: {e}{_user_frame(e, file)}") from None
    finally:
        sys.path.remove(str(file.parent))
    factory = getattr(module, entry, None)
    if factory is None or not callable(factory):
        raise ModelLoadError(f"{file}: defines no function {entry}(); a model file must define "
                             f"{entry}() -> (torch.nn.Module, example_inputs) (choose another name with --entry)")
    try:
        result = factory()
    except SystemExit as e:
        raise ModelLoadError(f"{file}: {entry}() called sys.exit({e.code!r}){_user_frame(e, file)}") from None
    except Exception as e:
        raise ModelLoadError(f"{file}: {entry}() raised {type(e).__name__}: {e}{_user_frame(e, file)}") from None
    if not (isinstance(result, tuple) and len(result) in (2, 3)):
        raise ModelLoadError(f"{file}: {entry}() must return (model, example_inputs) or (model, example_inputs, "
                             f"example_kwargs), got {type(result).__name__}")
    model, example_inputs = result[0], result[1]
    example_kwargs = result[2] if len(result) == 3 else {}
    if not isinstance(example_kwargs, dict):
        raise ModelLoadError(f"{file}: {entry}() returned {type(example_kwargs).__name__} as example_kwargs; "
                             f"expected a dict of keyword arguments")
    import torch

    if not isinstance(model, torch.nn.Module | torch.export.ExportedProgram):
        raise ModelLoadError(f"{file}: {entry}() returned a {type(model).__name__} as the model; expected a "
                             f"torch.nn.Module (or a torch.export ExportedProgram)")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    return model, tuple(example_inputs), example_kwargs


def _user_frame(error: BaseException, file: Path) -> str:
    """' (at file:line)' for the deepest frame of the user's file, if any."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == file]
    return f" (at {file}:{frames[-1].lineno})" if frames else ""
