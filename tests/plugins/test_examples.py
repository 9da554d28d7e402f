"""The example plug-ins of examples/plugins/, and plug-ins written outside the project tree, compile and
run the examples (results against torch eager)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.registry import MEMORY_PLANNERS, SCHEDULERS, TILE_POLICIES, StrategyError
from compiler import compile as compile_model
from compiler.model_files import load_model_file
from compiler.passes.fusion.registry import FUSION_STRATEGIES
from tests.conftest import assert_close

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "examples" / "plugins"


@pytest.fixture(autouse=True)
def _registries():
    with SCHEDULERS.scoped(), FUSION_STRATEGIES.scoped(), TILE_POLICIES.scoped(), MEMORY_PLANNERS.scoped():
        yield


def _check(model_file: str, **kwargs):
    model, inputs, _ = load_model_file(str(ROOT / "examples" / model_file))
    exe = compile_model(model, inputs, **kwargs)
    with torch.no_grad():
        expected = model(*inputs)
    assert_close(exe.run(*inputs)[0], expected)
    return exe


def test_dma_first_scheduler():
    exe = _check("mlp.py", plugins=[PLUGINS / "dma_first_scheduler.py"], scheduler="dma_first")
    assert exe.reports["schedule.txt"].startswith("# schedule (dma_first)")


def test_bounded_fusion():
    exe = _check("transformer_block.py", plugins=[PLUGINS / "bounded_fusion.py"], fusion="bounded", dump_dir=None)
    greedy = _check("transformer_block.py")
    assert exe.program.instructions and len(exe.hlo.split("fused_computation")) > len(greedy.hlo.split(
        "fused_computation"))  # more, smaller fusions


def test_narrow_tiles():
    exe = _check("mlp.py", plugins=[PLUGINS / "narrow_tiles.py"], tile_policy="narrow")
    tiling = exe.reports["tiling.txt"]
    assert "dot:1x64x784x512:f32: moving_tile=256, stationary_buffers=3 (tile policy narrow)" in tiling


def test_half_sbuf_memory_planner():
    full = _check("transformer_block.py")
    half = _check("transformer_block.py", plugins=[PLUGINS / "half_sbuf_memory.py"], memory_planner="half_sbuf")
    kept = lambda exe: exe.reports["memory_plan.txt"].count("kept in SBUF")  # noqa: E731
    assert kept(half) <= kept(full)


def test_sweepable_backend_options_change_the_program():
    queues = lambda exe: set(re.findall(r" dma q(\d+) ", exe.reports["schedule.txt"]))  # noqa: E731
    assert len(queues(_check("mlp.py"))) > 2 and queues(_check("mlp.py", dma_queues=2)) == {"0", "1"}
    assert "dot:1x64x784x512:f32: default" in _check("mlp.py", buffers=3).reports["tiling.txt"]
    _check("mlp.py", buffers=3, sbuf_budget=96 * 1024, fusion="cost", fusion_recompute_weight=0.5)


OUTSIDE_SCHEDULER = '''
from backend.registry import register_scheduler


@register_scheduler("reverse_ready", description="of the ready instructions, the one emitted last first")
def reverse_ready(problem):
    placer = problem.placer()
    ready = [i for i, p in enumerate(problem.preds) if not p]
    while ready:
        ready.sort()
        ready.extend(placer.commit(ready.pop()))
    return placer.placement
'''

OUTSIDE_FUSION = '''
from compiler.passes.fusion.registry import FusionStrategy, register_fusion_strategy


def allow(producer, consumer, kind, members):
    return "no reductions in a fusion" if producer.opcode == "reduce" else None


register_fusion_strategy(FusionStrategy("no_reduce", "greedy without reductions", allow=allow))
'''


@pytest.fixture
def outside(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_plugins")
    assert ROOT not in folder.parents
    (folder / "my_sched.py").write_text(textwrap.dedent(OUTSIDE_SCHEDULER))
    (folder / "my_fusion.py").write_text(textwrap.dedent(OUTSIDE_FUSION))
    return folder


def _env(tmp_path: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "NEURONC_CACHE_DIR": str(tmp_path / "cache")}


@pytest.mark.parametrize("model_file", ["mlp.py", "transformer_block.py", "convnet.py"])
def test_outside_plugins_compile_and_run_the_examples(outside, model_file):
    exe = _check(model_file, plugins=[outside / "my_sched.py", outside / "my_fusion.py"], scheduler="reverse_ready",
                 fusion="no_reduce")
    assert exe.reports["schedule.txt"].startswith("# schedule (reverse_ready)")


def test_outside_plugins_on_the_command_line(outside, tmp_path):
    out = tmp_path / "mlp.neff"
    cli = [sys.executable, "-c", "import sys; from compiler.cli import main; sys.exit(main())"]
    done = subprocess.run(cli + ["compile", str(ROOT / "examples" / "transformer_block.py"), "-o", str(out),
                                 "--plugin", str(outside / "my_sched.py"), "--plugin", str(outside / "my_fusion.py"),
                                 "--scheduler", "reverse_ready", "--fusion", "no_reduce", "--dump-dir",
                                 str(tmp_path / "dump")], cwd=tmp_path, capture_output=True, text=True,
                          env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "strategy no_reduce: no reductions in a fusion" in (tmp_path / "dump" / "fusion_decisions.txt").read_text()
    ran = subprocess.run(cli + ["run", str(out), "--random"], cwd=tmp_path, capture_output=True, text=True,
                         env=_env(tmp_path))
    assert ran.returncode == 0 and "out0" in ran.stdout, ran.stderr
    unknown = subprocess.run(cli + ["compile", str(ROOT / "examples" / "mlp.py"), "-o", str(out), "--scheduler",
                                    "reverse_ready"], cwd=tmp_path, capture_output=True, text=True,
                             env=_env(tmp_path))
    assert unknown.returncode == 1 and "scheduler='reverse_ready' is not one of" in unknown.stderr


def test_a_scheduler_that_breaks_dependencies_is_refused(tmp_path):
    bad = tmp_path / "bad_sched.py"
    bad.write_text(textwrap.dedent('''
        from backend.schedule import Placement
        from backend.registry import register_scheduler

        @register_scheduler("backwards")
        def backwards(problem):
            p = problem.placer().placement
            n = len(problem.ops)
            return Placement(list(reversed(range(n))), p.engines, {}, [0.0] * n, [0.0] * n)
    '''))
    with pytest.raises(StrategyError, match="scheduler 'backwards' placed instruction .* before its predecessor"):
        _check("mlp.py", plugins=[bad], scheduler="backwards")


def test_outputs_match_default(outside):
    model, inputs, _ = load_model_file(str(ROOT / "examples" / "mlp.py"))
    a = compile_model(model, inputs).run(*inputs)[0]
    b = compile_model(model, inputs, plugins=[outside / "my_sched.py"], scheduler="reverse_ready").run(*inputs)[0]
    np.testing.assert_array_equal(a, b)
