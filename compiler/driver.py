"""The public Python API: compile a model to an Executable, run and profile it on the emulator."""

from __future__ import annotations

import atexit
import gc
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from backend.options import BackendOptions
from compiler import capacity
from compiler.cache import cache_key
from compiler.cache_entries import cache_for, map_entry_weights, read_entry, trace_lookup, trace_store, write_entry
from compiler.executable import (
    Executable,
    LoadedExecutable,
    to_numpy,  # noqa: F401 (re-exported)
)
from compiler.lazy import lazy_import
from compiler.options import CompileOptions, make_options
from compiler.stats import CompileStats, Progress
from hlo.errors import HloParseError, ModelLoadError, NeuroncError, VerificationError
from hlo.io import constants_file_of, load_hlo_file
from hlo.ir import Module
from hlo.parser import parse_module
from hlo.printer import is_elided, print_module
from hlo.verifier import verify_module
from isa import neff
from isa.collector import paused as collector_paused  # (compile, and the CLI's model loading)
from isa.errors import IsaError
from isa.program import Program
from isa.target import load_target as isa_load_target

if TYPE_CHECKING:
    from frontend import Signature

# A torch model's capture, the pass pipeline and the backend load when a compile needs them: a cache hit of an
# HLO file, or loading a .neff, imports none of them (nor torch)
backend = lazy_import("backend")
frontend = lazy_import("frontend")
pipeline_module = lazy_import("compiler.pipeline")

log = logging.getLogger("neuronc")


def load(path: str | os.PathLike) -> Executable:
    """Load an Executable from a .neff file written by Executable.save or `neuronc compile`."""
    program = neff.load(os.fspath(path))
    try:
        load_target(program.target)
    except NeuroncError as e:
        raise NeuroncError(f"{os.fspath(path)}: the program was compiled for target {program.target!r}, "
                           f"which cannot be loaded here ({e})") from None
    text = program.meta.get("signature")
    return LoadedExecutable(program, text if isinstance(text, str) else None, hlo=str(program.meta.get("hlo", "")))


def load_target(name_or_path: str) -> Any:
    """The isa Target; a NeuroncError naming the target when it is unknown or its file is malformed."""
    try:
        return isa_load_target(name_or_path)
    except json.JSONDecodeError as e:
        raise NeuroncError(f"target file {name_or_path}: not valid JSON ({e})") from None
    except ValueError as e:  # unknown name, unreadable file
        raise NeuroncError(str(e)) from None
    except (KeyError, TypeError, AttributeError) as e:
        raise NeuroncError(f"target {name_or_path}: not a valid target description "
                           f"(missing or malformed field {e})") from None


def _read_hlo_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ModelLoadError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                             f"an .hlo file is HLO text") from None
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read: {e.strerror}") from None


def _load_hlo(path: str, target_machine: Any) -> tuple[Module, str]:
    """An .hlo file and its constants; a constant too large for HBM is reported before its data is read,
    and before a missing side file is."""
    text = _read_hlo_file(path)
    try:
        return load_hlo_file(path), text
    except HloParseError:
        try:
            bare = parse_module(text, constants=None, source=path)
        except HloParseError:
            bare = None
        if bare is not None:
            capacity.check_module(bare, target_machine)
        raise


def _import_module(model: Any, example_inputs: Sequence[Any], options: CompileOptions, target_machine: Any,
                   example_kwargs: dict[str, Any] | None = None
                   ) -> tuple[Module, str | None, str | None, Signature | None]:
    """The HLO module of `model`, with its text and file name when it was HLO (to locate verifier errors), and
    the model's calling convention when it was a torch model."""
    if not isinstance(model, (Module, str, os.PathLike)):
        capacity.check_model(model, tuple(example_inputs), target_machine)
        module, signature = frontend.import_model_with_signature(model, tuple(example_inputs), capture=options.capture,
                                                        example_kwargs=example_kwargs)
        return module, None, None, signature
    if example_kwargs:
        raise ModelLoadError("example_kwargs are for a torch model; an HLO module takes positional inputs")
    module, text, source = _import_hlo(model, target_machine)
    return module, text, source, None


def _import_hlo(model: Any, target_machine: Any) -> tuple[Module, str | None, str | None]:
    if isinstance(model, Module):
        return model, None, None
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if _is_hlo_text(text):
            return parse_module(text), text, None
        try:
            is_file = Path(text).is_file()
        except OSError as e:  # e.g. a name too long for the file system
            raise ModelLoadError(f"{text[:80]}: not HLO text and not a readable file ({e.strerror})") from None
        if not is_file:
            raise ModelLoadError(f"{text}: no such HLO file")
    module, hlo_text = _load_hlo(text, target_machine)
    return module, hlo_text, text


def _is_hlo_text(text: str) -> bool:
    """HLO text rather than a file's path (a path has neither)."""
    return "HloModule" in text or "\n" in text


def _hlo_source_digest(model: str | os.PathLike) -> str | None:
    """XXH3-128 of HLO text, or of an .hlo file's bytes and those of the constants side file its header names:
    the key of a lookup that skips parsing (the parsed module's canonical text keys the program itself).
    None when the file cannot be read here (the capture then says why)."""
    text = os.fspath(model)
    digest = xxhash.xxh3_128()
    if _is_hlo_text(text):
        digest.update(text.encode())
        return digest.hexdigest()
    try:
        source = Path(text).read_bytes()
        digest.update(source)
        side = constants_file_of(source.decode("utf-8"))
        if side is not None:
            digest.update(b"\0side\0")
            digest.update((Path(text).parent / side).read_bytes())
    except (OSError, UnicodeDecodeError):
        return None
    return digest.hexdigest()


def _verify(module: Module, text: str | None, source: str | None) -> None:
    """The verifier, its error prefixed with file:line of the instruction it names when the text is known."""
    try:
        verify_module(module)
    except VerificationError as e:
        where = _locate(str(e), text, source)
        if where is None:
            raise
        raise VerificationError(f"{where}: {e}") from None


def _locate(message: str, text: str | None, source: str | None) -> str | None:
    """'file:line' (or 'line N') of the first instruction a verifier message names, found in the HLO text."""
    if not text:
        return None
    for name in re.findall(r"%([\w.\-]+) \(", message):
        pattern = re.compile(rf"^\s*(?:ROOT\s+)?%?{re.escape(name)}\s*=", re.M)
        m = pattern.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            return f"{source}:{line}" if source else f"line {line}"
    return None


def compile(model: Any, example_inputs: Sequence[Any] = (), target: str = "trn1", opt_level: int = 2,
            auto_cast: str = "none", dump_dir: str | None = None, *, example_kwargs: dict[str, Any] | None = None,
            **kwargs: Any) -> Executable:
    """Compile a torch.nn.Module, ExportedProgram, HLO Module, HLO text or .hlo path for `target`.

    A torch model is captured as called with ``model(*example_inputs, **example_kwargs)``; the Executable is
    then called the same way (``exe(*args, **kwargs)``). Extra keyword arguments are fields of CompileOptions
    (auto_cast_type, dump_pass_re, verify_each, disabled_passes, fusion, capture, timing).
    """
    options = make_options(target=target, opt_level=opt_level, auto_cast=auto_cast, dump_dir=dump_dir, **kwargs)
    return compile_options(model, example_inputs, options, example_kwargs)


def compile_options(model: Any, example_inputs: Sequence[Any], options: CompileOptions,
                    example_kwargs: dict[str, Any] | None = None, *, detach: bool = True) -> Executable:
    """`compile` with the options already gathered (the CLI builds them from its flags).

    ``detach=False``: the program may keep sharing the model's weight memory (the caller never changes the
    model afterwards, as the CLI, which saves the program and exits): no copy of the weights it did not
    re-lay out (Llama's 1 GB embedding table).

    Python's cyclic garbage collector is paused meanwhile (and restored after): a compile allocates
    hundreds of thousands of objects that live to its end (fx graphs, HLO, ISA instructions), and the
    collector's repeated full scans of them cost GPT-2's compile about a fifth of its CPU time. For the same
    reason the collector's last full scan at interpreter exit is skipped (`_skip_exit_collection`)."""
    _skip_exit_collection()
    with collector_paused():
        return _compile_options(model, example_inputs, options, example_kwargs, detach)


_EXIT_HOOK: list[bool] = []


def _skip_exit_collection() -> None:
    """At interpreter exit, freeze the objects still alive instead of letting the interpreter's final full
    collection traverse them: a process that compiled holds millions of them (torch, the model, the program),
    and that scan cost `neuronc compile` of GPT-2 ~1.2 CPU s after its work was done. Objects are still freed
    by reference counting; only unreachable cycles left at exit are not collected (their memory goes back with
    the process, and Python does not promise __del__ at exit). Registered once, by the first compile."""
    if not _EXIT_HOOK:
        _EXIT_HOOK.append(True)
        atexit.register(_freeze_for_exit)


def _freeze_for_exit() -> None:
    gc.disable()
    gc.freeze()


def _compile_options(model: Any, example_inputs: Sequence[Any], options: CompileOptions,
                     example_kwargs: dict[str, Any] | None, detach: bool = True) -> Executable:
    stats = CompileStats(progress=Progress(enabled=not options.quiet))
    try:
        target_machine = load_target(options.target)
        fast = None
        if isinstance(model, (str, os.PathLike)) and not example_kwargs:
            fast = trace_lookup(lambda: _hlo_source_digest(model), "hlo-source", options, target_machine, stats,
                                by="source")
        elif options.capture == "export" and not isinstance(model, (Module, str, os.PathLike)):
            capacity.check_model(model, tuple(example_inputs), target_machine)  # before hashing its weights
            fast = trace_lookup(lambda: frontend.trace_key(model, example_inputs, example_kwargs), "export", options,
                                target_machine, stats)
        if isinstance(fast, Executable):
            return fast
        with stats.phase("capture", "frontend"):
            module, text, source, signature = _import_module(model, example_inputs, options, target_machine,
                                                             example_kwargs)
            capacity.check_module(module, target_machine)  # before the verifier: it refuses constants without data
            _verify(module, text, source)
        exe = _compile_cached(module, target_machine, options, stats, detach)
        exe.signature = signature
        if fast is not None:
            trace_store(fast, exe)
        return exe
    finally:
        if stats.progress:
            stats.progress.close()


def _compile_cached(module: Module, target_machine: Any, options: CompileOptions, stats: CompileStats,
                    detach: bool = True) -> Executable:
    """`compile_module` through the compile cache (when it is on and nothing is dumped). The program's
    weights are detached from the model once stored (they are then the entry's mapped file: no copy)."""
    cache = cache_for(options)
    if cache is None:
        stats.cache = "off"
        return compile_module(module, target_machine, options, stats, detach=detach)
    with stats.phase("cache lookup", "cache"):
        key = cache_key(print_module(module), _large_constants(module), options.semantic(), target_machine.data)
        entry = cache.get(key)
        exe = read_entry(entry) if entry is not None else None
        if entry is not None and exe is None:
            cache.discard(key)
    if exe is not None:
        stats.cache = f"hit {key} ({entry})"
        log.info("neuronc: compile cache hit %s (%s)", key[:16], entry)
        exe.compile_stats = stats
        return exe
    stats.cache = f"miss {key}, stored in {cache.entry(key)}"
    exe = compile_module(module, target_machine, options, stats, detach=False)
    with stats.phase("cache store", "cache"):
        try:
            entry = cache.put(key, lambda folder: write_entry(exe, folder))
            map_entry_weights(exe.program, entry)
        except (OSError, IsaError) as e:  # a full or read-only cache must not fail the compile
            stats.cache = f"miss {key[:16]}, not stored ({getattr(e, 'strerror', None) or e})"
            log.warning("neuronc: compile cache: cannot store %s: %s", key[:16], e)
    log.info("neuronc: compile cache miss %s, stored in %s", key[:16], cache.entry(key))
    if detach:
        _detach_from_model(exe.program)  # what the entry did not replace (not stored)
    return exe


def _io_types(module: Module) -> tuple[str, str]:
    """The HLO element types of the entry's parameters and results, comma-separated (program meta)."""
    entry = module.entry
    root = entry.root.shape
    outs = root.tuple_shapes if root.is_tuple else (root,)
    return ",".join(p.shape.dtype for p in entry.parameters), ",".join(s.dtype for s in outs)


def _large_constants(module: Module) -> Iterator[np.ndarray]:
    """The data of the constants the HLO text elides (the cache key hashes it)."""
    for computation in module.computations:
        for inst in computation.instructions:
            if is_elided(inst) and inst.literal is not None:
                yield inst.literal


def _detach_from_model(program: Program) -> None:
    """Copy the constants that still share a torch tensor's memory (the frontend does not copy weights;
    most reach the program re-laid out anyway): the program must not change when its model does."""
    for name, array in program.constants.items():
        if frontend.shares_torch_memory(array):
            program.constants[name] = np.array(array)


def backend_options(options: CompileOptions) -> BackendOptions:
    """The backend's knobs that CompileOptions sets (the rest keep backend/options.py's defaults)."""
    return BackendOptions(list_schedule=options.scheduler, dma_queues=options.dma_queues,
                          sbuf_budget_bytes=options.sbuf_budget, stationary_buffers=options.buffers,
                          moving_buffers=options.buffers, tile_policy=options.tile_policy,
                          tile_overrides=options.tile_choices(), memory_planner=options.memory_planner)


def compile_module(module: Module, target_machine: Any, options: CompileOptions,
                   stats: CompileStats | None = None, *, detach: bool = True) -> Executable:
    """Run the pass pipeline and the backend on an HLO module (``detach``: copy the weights that still
    share a torch tensor's memory)."""
    stats = stats or CompileStats()
    verify_module(module)
    capacity.check_module(module, target_machine)
    input_types, output_types = _io_types(module)
    pipeline = pipeline_module.build_pipeline(options.opt_level, options)
    if stats.progress:
        pipeline.progress = lambda name: stats.progress.update(name, len(stats.phases) + len(pipeline.runs))
    pipeline.run(module)
    for run in pipeline.runs:
        stats.add(run.name, run.seconds, run.peak_bytes, "pass", run.cpu_seconds)
    result = backend.compile_module(module, target_machine, options=backend_options(options), timer=stats)
    capacity.check_program(result.program, target_machine)
    if detach:
        _detach_from_model(result.program)
    result.program.meta.update(input_types=input_types, output_types=output_types)
    exe = Executable(program=result.program, hlo=print_module(module),
                     pass_timing=pipeline.timing_report(), compile_stats=stats,
                     reports={"memory_plan.txt": result.memory_plan, "schedule.txt": result.schedule,
                              "tiling.txt": result.tiling})
    if options.dump_dir:
        out = Path(options.dump_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in exe.reports.items():
            (out / name).write_text(text)
        (out / "program.s").write_text(exe.asm)
    return exe
