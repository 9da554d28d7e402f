"""Differential fuzzing campaign: ``python benchmarks/fuzz.py --n N [--seed S] [--ops CLASS ...]``.

Case i of seed S is the program generated from ``random.Random("S:i")``, compiled at -O0..-O3 for trn1 and
trn2, run in checked mode and compared with the interpreter, eager torch and a float64 reference (see
tests/fuzz/). Compile errors of op classes the backend does not support yet are counted apart from real
failures. The first cases of each new failure signature are shrunk and saved as .hlo reproducers (default
tests/regressions/, which tests/regressions/test_regressions.py runs). Prints a summary; --json writes it.

``--per-opcode K`` runs the per-opcode fuzzer instead (tests/fuzz/opcodes.py): K cases of every opcode of the
IR's table (or of ``--opcode`` ones), random shapes and element types, at -O0 and -O2 against the HLO
interpreter; prints per opcode how many level runs matched, were refused (typed) or were wrong or crashed.
Case i of an opcode is ``random.Random("S:OPCODE:i")``: ``--per-opcode 1 --opcode OP --start i`` replays it.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fuzz.choices import RandomChooser  # noqa: E402
from tests.fuzz.generate import OP_CLASSES, GenConfig, generate  # noqa: E402
from tests.fuzz.harness import ALL_CONFIGS, EXTRA_CONFIGS, SUPPORTED_CLASSES, Failure, run_case  # noqa: E402
from tests.fuzz.minimize import drop_unused_parameters, same_failure, save_reproducer, shrink  # noqa: E402
from tests.fuzz.opcodes import GENERATORS, OPCODES, opcode_case, run_opcode_case  # noqa: E402
from tests.fuzz.opcodes import OUTCOMES as OPCODE_OUTCOMES  # noqa: E402


class CaseTimeout(BaseException):
    """Raised by SIGALRM when one case runs too long (a BaseException, so no handler inside swallows it)."""


@dataclass
class Campaign:
    cases: int = 0
    ok: int = 0
    unsupported_cases: int = 0
    failing_cases: int = 0
    timeouts: list[int] = field(default_factory=list)
    harness_errors: list[int] = field(default_factory=list)  # cases where the fuzzer itself failed
    emulator_runs: int = 0
    kinds: Counter = field(default_factory=Counter)  # failure kind -> cases
    unsupported: Counter = field(default_factory=Counter)  # unsupported signature -> cases
    signatures: dict[str, dict] = field(default_factory=dict)  # failure signature -> first case, count, files

    def to_dict(self) -> dict:
        return {"cases": self.cases, "ok": self.ok, "unsupported_cases": self.unsupported_cases,
                "failing_cases": self.failing_cases, "timeouts": self.timeouts,
                "harness_errors": self.harness_errors,
                "emulator_runs": self.emulator_runs, "failures_by_kind": dict(self.kinds),
                "unsupported": dict(self.unsupported), "signatures": self.signatures}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, help="number of cases")
    p.add_argument("--per-opcode", type=int, metavar="K", help="per-opcode mode: K cases of every opcode")
    p.add_argument("--opcode", nargs="+", help="per-opcode mode: only these opcodes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first case index (to resume a campaign)")
    p.add_argument("--ops", nargs="+", default=["all"], metavar="CLASS",
                   help=f"op classes: {' '.join(OP_CLASSES)}; 'all' (default) or 'supported'")
    p.add_argument("--dtypes", nargs="+", default=["f32", "bf16"], choices=["f32", "bf16"])
    p.add_argument("--max-ops", type=int, default=8)
    p.add_argument("--max-dim", type=int, default=700)
    p.add_argument("--max-elements", type=int, default=1 << 14, help="per value")
    p.add_argument("--max-macs", type=int, default=1 << 20, help="per dot")
    p.add_argument("--max-batch", type=int, default=64, help="batch elements per batched dot")
    p.add_argument("--timeout", type=int, default=120, help="seconds per case")
    p.add_argument("--extra-configs", action="store_true",
                   help="also -O2/-O0 with --scheduler inorder and -O2/-O3 with --auto-cast matmult/all")
    p.add_argument("--out", default=str(ROOT / "tests" / "regressions"), help="where reproducers go")
    p.add_argument("--save-per-signature", type=int, default=2, help="reproducers saved per failure signature")
    p.add_argument("--shrink-evaluations", type=int, default=300)
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--progress", type=int, default=100, help="print a progress line every this many cases")
    return p.parse_args(argv)


def _classes(ops: list[str]) -> tuple[str, ...]:
    if ops == ["all"]:
        return OP_CLASSES
    if ops == ["supported"]:
        return tuple(c for c in OP_CLASSES if c in SUPPORTED_CLASSES)
    unknown = [o for o in ops if o not in OP_CLASSES]
    if unknown:
        raise SystemExit(f"fuzz.py: unknown op class(es) {', '.join(unknown)}; known: {', '.join(OP_CLASSES)}")
    return tuple(ops)


def _on_alarm(signum, frame):  # noqa: ARG001
    raise CaseTimeout()


def _minimize_and_save(program, result, signature: str, config: GenConfig, args, origin: str) -> str:
    configs = result.failing_configs(signature)[:1] or list(ALL_CONFIGS[:1])
    shrunk = shrink(program.choices, config, same_failure(signature, configs),
                    max_evaluations=args.shrink_evaluations, deadline_s=args.timeout)
    final = run_case(shrunk.program.module, args.configs, classes=shrunk.program.classes)
    trimmed = run_case(drop_unused_parameters(shrunk.program.module), args.configs, classes=shrunk.program.classes)
    if signature in trimmed.signatures():
        final = trimmed
    if signature not in final.signatures():  # flaky under all configs: keep the original
        final, shrunk_note = result, "not minimized"
    else:
        shrunk_note = (f"minimized from {shrunk.original_choices} to {len(shrunk.program.choices)} choices "
                       f"in {shrunk.evaluations} evaluations")
    path = save_reproducer(final, signature, Path(args.out), f"{origin}; {shrunk_note}")
    return str(path)


def _record(campaign: Campaign, case: int, result, program, config: GenConfig, args) -> None:
    campaign.emulator_runs += result.runs
    for failure in {f.signature: f for f in result.unsupported}.values():
        campaign.unsupported[failure.signature] += 1
    if result.ok:
        if result.unsupported:
            campaign.unsupported_cases += 1
        else:
            campaign.ok += 1
        return
    campaign.failing_cases += 1
    for kind in {f.kind for f in result.failures}:
        campaign.kinds[kind] += 1
    by_signature: dict[str, Failure] = {}
    for f in result.failures:
        by_signature.setdefault(f.signature, f)
    for signature, failure in by_signature.items():
        levels = sorted({str(c).replace(f" {c.target}", "") for c in result.failing_configs(signature)})
        key = f"{signature} [{','.join(levels)}]"  # one bug often fails at the same levels
        entry = campaign.signatures.setdefault(key, {"count": 0, "first_case": case, "example": str(failure),
                                                     "cases": [], "reproducers": []})
        if len(entry["cases"]) < 50:
            entry["cases"].append(case)
        entry["count"] += 1
        if len(entry["reproducers"]) < args.save_per_signature:
            origin = f"found by benchmarks/fuzz.py --seed {args.seed}, case {case}"
            try:
                entry["reproducers"].append(_minimize_and_save(program, result, signature, config, args, origin))
            except CaseTimeout:
                entry["reproducers"].append(str(save_reproducer(result, signature, Path(args.out),
                                                                f"{origin}; not minimized (timeout)")))
            print(f"  case {case}: {failure} -> {entry['reproducers'][-1]}", flush=True)


def run(args: argparse.Namespace) -> Campaign:
    config = GenConfig(classes=_classes(args.ops), dtypes=tuple(args.dtypes), max_ops=args.max_ops,
                       max_dim=args.max_dim, max_elements=args.max_elements, max_macs=args.max_macs,
                       max_batch=args.max_batch)
    campaign = Campaign()
    signal.signal(signal.SIGALRM, _on_alarm)
    t0 = time.monotonic()
    for case in range(args.start, args.start + args.n):
        signal.alarm(args.timeout)
        try:
            program = generate(RandomChooser(f"{args.seed}:{case}"), config)
            result = run_case(program.module, args.configs, classes=program.classes)
            signal.alarm(args.timeout * 3)  # shrinking and saving reproducers
            _record(campaign, case, result, program, config, args)
        except CaseTimeout:
            campaign.timeouts.append(case)
            print(f"  case {case}: timeout after {args.timeout} s", flush=True)
        except Exception as e:  # noqa: BLE001 - a bug of the fuzzer itself must not end the campaign
            campaign.harness_errors.append(case)
            print(f"  case {case}: fuzzer error {type(e).__name__}: {e}", flush=True)
        finally:
            signal.alarm(0)
        campaign.cases += 1
        if campaign.cases % args.progress == 0:
            rate = campaign.cases / (time.monotonic() - t0)
            print(f"[{campaign.cases}/{args.n}] ok {campaign.ok}, unsupported {campaign.unsupported_cases}, "
                  f"failing {campaign.failing_cases}, timeouts {len(campaign.timeouts)} ({rate:.2f} cases/s)",
                  flush=True)
    return campaign


def summary(campaign: Campaign, args: argparse.Namespace, seconds: float) -> str:
    lines = [f"fuzz campaign: seed {args.seed}, cases {args.start}..{args.start + campaign.cases - 1}, "
             f"op classes {' '.join(_classes(args.ops))}, {seconds / 60:.1f} min",
             f"  cases: {campaign.cases} (each at {len(args.configs)} configurations; "
             f"{campaign.emulator_runs} emulator runs)",
             f"  ok: {campaign.ok}",
             f"  unsupported only: {campaign.unsupported_cases}",
             f"  failing: {campaign.failing_cases}  {dict(campaign.kinds)}",
             f"  timeouts: {len(campaign.timeouts)} {campaign.timeouts[:20]}",
             f"  fuzzer errors: {len(campaign.harness_errors)} {campaign.harness_errors[:20]}"]
    if campaign.unsupported:
        lines.append("unsupported (cases):")
        lines += [f"  {n:6d}  {s}" for s, n in campaign.unsupported.most_common()]
    if campaign.signatures:
        lines.append("failure signatures (cases, first case, reproducers):")
        for entry in sorted(campaign.signatures.values(), key=lambda e: -e["count"]):
            lines.append(f"  {entry['count']:6d}  case {entry['first_case']}: {entry['example'][:300]}")
            lines += [f"          -> {r}" for r in entry["reproducers"]]
    return "\n".join(lines)


def run_per_opcode(args: argparse.Namespace) -> tuple[dict[str, dict], str]:
    """The per-opcode campaign: per opcode, counts of outcomes over its cases x levels, and the first
    non-ok detail of each outcome."""
    opcodes = args.opcode or list(OPCODES)
    unknown = [o for o in opcodes if o not in GENERATORS]
    if unknown:
        raise SystemExit(f"fuzz.py: no generator for {', '.join(unknown)}; known: {' '.join(OPCODES)}")
    table: dict[str, dict] = {}
    signal.signal(signal.SIGALRM, _on_alarm)
    for op in opcodes:
        row: dict = {o: 0 for o in OPCODE_OUTCOMES} | {"examples": {}}
        for i in range(args.start, args.start + args.per_opcode):
            signal.alarm(args.timeout)
            try:
                results = run_opcode_case(opcode_case(op, random.Random(f"{args.seed}:{op}:{i}"))).items()
            except CaseTimeout:
                results = [(-1, ("crash", f"timeout after {args.timeout} s"))]
            except Exception as e:  # noqa: BLE001 - a fuzzer error is reported, the campaign goes on
                results = [(-1, ("crash", f"fuzzer: {type(e).__name__}: {e}".splitlines()[0]))]
            finally:
                signal.alarm(0)
            for level, (outcome, detail) in results:
                row[outcome] += 1
                if outcome != "ok":
                    row["examples"].setdefault(outcome, f"case {i} -O{level}: {detail}"[:240])
        table[op] = row
        print(f"{op:24s} " + " ".join(f"{o} {row[o]:3d}" for o in OPCODE_OUTCOMES), flush=True)
    lines = [f"per-opcode fuzz: seed {args.seed}, {args.per_opcode} cases per opcode at -O0 and -O2 "
             f"(counts are level runs)", f"{'opcode':24s} " + " ".join(f"{o:>8s}" for o in OPCODE_OUTCOMES)]
    for op, row in table.items():
        lines.append(f"{op:24s} " + " ".join(f"{row[o]:8d}" for o in OPCODE_OUTCOMES))
    totals = {o: sum(r[o] for r in table.values()) for o in OPCODE_OUTCOMES}
    lines.append(f"{'TOTAL':24s} " + " ".join(f"{totals[o]:8d}" for o in OPCODE_OUTCOMES))
    for op, row in table.items():
        for outcome, example in row["examples"].items():
            lines.append(f"  {op} {outcome}: {example}")
    return table, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.per_opcode:
        table, text = run_per_opcode(args)
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps(table, indent=2))
        return 0 if all(r["mismatch"] == 0 and r["crash"] == 0 for r in table.values()) else 1
    if args.n is None:
        raise SystemExit("fuzz.py: give --n N (or --per-opcode K)")
    args.configs = ALL_CONFIGS + (EXTRA_CONFIGS if args.extra_configs else ())
    t0 = time.monotonic()
    campaign = run(args)
    text = summary(campaign, args, time.monotonic() - t0)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(campaign.to_dict(), indent=2))
    return 0 if campaign.failing_cases == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
