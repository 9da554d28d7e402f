"""Shrink a failing case and save it as an .hlo reproducer.

The shrinker edits the generator's recorded choice sequence (as hypothesis does internally): it deletes
chunks of choices and lowers single values toward 0, replays the edited sequence through the generator
(``ReplayChooser``) and keeps the edit when the program still fails with the same failure signature and its
own choice sequence is shorter, or equally long and lexicographically smaller. Fewer choices means fewer
instructions and smaller dims, since the generator's low values are its simplest decisions.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hlo.ir import Module
from hlo.parser import parse_module
from hlo.printer import print_module
from tests.fuzz.choices import ReplayChooser
from tests.fuzz.generate import GenConfig, Program, generate
from tests.fuzz.harness import CaseResult, Config, run_case

Predicate = Callable[[Program], bool]


@dataclass
class Shrunk:
    program: Program
    evaluations: int
    original_choices: int


def _key(choices: Sequence[int]) -> tuple[int, list[int]]:
    return len(choices), list(choices)


def _without_op(program: Program, k: int) -> list[int] | None:
    """The choices without op k's span, the op count (the choice just before the first span) one lower."""
    spans, choices = program.spans, program.choices
    count_at = spans[0] - 1
    if count_at < 0 or choices[count_at] == 0:
        return None
    candidate = choices[:spans[k]] + choices[spans[k + 1]:]
    candidate[count_at] -= 1
    return candidate


def _lower(choices: list[int], i: int, attempt: Callable[[list[int]], bool]) -> bool:
    """Bisect choice i down to the lowest value that still fails (0 first)."""
    def at(value: int) -> list[int]:
        return choices[:i] + [value] + choices[i + 1:]

    lo, hi = 0, choices[i]  # hi fails; lo is tried first
    if hi == 0:
        return False
    if attempt(at(0)):
        return True
    lowered = False
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if attempt(at(mid)):
            hi, lowered = mid, True
        else:
            lo = mid
    return lowered


def shrink(choices: Sequence[int], config: GenConfig, still_fails: Predicate, *, max_evaluations: int = 300,
           deadline_s: float = 300.0) -> Shrunk:
    """The smallest choice sequence found (within the budget) whose program still satisfies ``still_fails``."""
    start = time.monotonic()
    best = generate(ReplayChooser(choices), config)
    evaluations = 0

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, evaluations
        if evaluations >= max_evaluations or time.monotonic() - start > deadline_s:
            return False
        evaluations += 1
        try:
            program = generate(ReplayChooser(candidate), config)
        except Exception:  # noqa: BLE001 - an edit the generator cannot build is just not smaller
            return False
        if _key(program.choices) >= _key(best.choices) or not still_fails(program):
            return False
        best = program
        return True

    improved = True
    while improved and evaluations < max_evaluations and time.monotonic() - start <= deadline_s:
        improved = False
        k = len(best.spans) - 2
        while k >= 0:  # whole ops, the last first
            candidate = _without_op(best, k)
            if candidate is not None and attempt(candidate):
                improved = True
            k = min(k - 1, len(best.spans) - 2)
        for size in (8, 4, 2, 1):
            i = 0
            while i < len(best.choices):
                current = best.choices
                if attempt(current[:i] + current[i + size:]):
                    improved = True
                else:
                    i += size
        i = 0
        while i < len(best.choices):
            improved |= _lower(best.choices, i, attempt)
            i += 1
    return Shrunk(best, evaluations, len(choices))


def same_failure(signature: str, configs: Sequence[Config]) -> Predicate:
    """A predicate: the program still fails with ``signature`` at one of ``configs``."""
    def still_fails(program: Program) -> bool:
        result = run_case(program.module, configs, classes=program.classes)
        return signature in result.signatures()
    return still_fails


def drop_unused_parameters(module: Module) -> Module:
    """A copy of ``module`` (by its text) without the entry parameters nothing uses, renumbered in order."""
    copy = parse_module(print_module(module))
    entry = copy.entry
    used = {id(o) for inst in entry.instructions for o in inst.operands} | {id(entry.root)}
    params = entry.parameters
    entry.instructions = [i for i in entry.instructions if i.opcode != "parameter" or id(i) in used]
    for number, param in enumerate(p for p in params if id(p) in used):
        param.parameter_number = number
    return parse_module(print_module(copy))


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


def save_reproducer(result: CaseResult, signature: str, directory: Path, origin: str) -> Path:
    """Write ``result.hlo`` to ``directory/fuzz_<kind>_<hash>.hlo`` with a comment header naming the failure."""
    failures = [f for f in result.failures if f.signature == signature] or result.failures
    first = failures[0]
    digest = hashlib.sha1(result.hlo.encode()).hexdigest()[:10]
    path = directory / f"fuzz_{first.kind}_{digest}.hlo"
    configs = sorted({str(f.config) for f in failures if f.config}) or ["references"]
    header = [
        "/* Differential-fuzzer reproducer (tests/fuzz, benchmarks/fuzz.py).",
        f"   {origin}",
        f"   failure: {first.kind}: {first.detail}",
        f"   at: {', '.join(configs)}",
        f"   message: {first.message}",
        "*/",
    ]
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(_comment("\n".join(header[:-1])) + "\n*/\n" + result.hlo)
    return path
