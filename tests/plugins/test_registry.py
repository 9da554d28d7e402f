"""The strategy registries and plug-in loading (backend/registry.py, compiler/plugins.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.options import BackendOptions
from backend.registry import (
    MEMORY_PLANNERS,
    SCHEDULERS,
    TILE_POLICIES,
    KernelShape,
    Registry,
    StrategyError,
    kernel_options,
    register_tile_policy,
)
from compiler.options import CompileOptions, PassOptionError
from compiler.passes.fusion.registry import FUSION_STRATEGIES
from compiler.plugins import PluginError, load_plugin


def test_built_ins_are_registered():
    assert {"list", "ready_time", "inorder"} <= set(SCHEDULERS.names())
    assert {"greedy", "cost", "none"} <= set(FUSION_STRATEGIES.names())
    assert "default" in TILE_POLICIES and {"residency", "spill"} <= set(MEMORY_PLANNERS.names())
    assert SCHEDULERS.get("list").reorders_pe_groups and not SCHEDULERS.get("inorder").reorders_pe_groups


def test_register_get_refuse_and_scope():
    registry: Registry[int] = Registry("widget", "widget")
    with registry.scoped():
        registry.register("a", 1)
        assert registry.get("a") == 1 and "a" in registry
        with pytest.raises(StrategyError, match="widget 'a' is already registered"):
            registry.register("a", 2)
        registry.register("a", 3, replace=True)
        assert registry.get("a") == 3
    with pytest.raises(StrategyError, match="unknown widget 'a'; known: "):
        registry.get("a")
    with pytest.raises(StrategyError, match="use letters"):
        registry.register("a b", 1)


def test_unknown_names_are_refused_naming_the_known_ones():
    with pytest.raises(PassOptionError, match="scheduler='mine' is not one of list, ready_time, inorder .a plug-in"):
        CompileOptions(scheduler="mine")
    with pytest.raises(PassOptionError, match="fusion='nope' is not one of greedy, cost, none"):
        CompileOptions(fusion="nope")
    with pytest.raises(StrategyError, match="unknown memory planner 'x'; known: residency, spill"):
        MEMORY_PLANNERS.get("x")


def test_tile_policy_results_are_checked():
    shape = KernelShape("dot", (1, 64, 128, 256), "f32")
    assert shape.key == "dot:1x64x128x256:f32"
    with TILE_POLICIES.scoped():
        register_tile_policy("huge")(lambda s, o: replace(o, moving_tile=4096))
        register_tile_policy("sneaky")(lambda s, o: replace(o, dma_queues=1))
        register_tile_policy("wrong")(lambda s, o: None)
        with pytest.raises(StrategyError, match="chose moving_tile=4096 for dot:1x64x128x256:f32; allowed: 1..512"):
            kernel_options(shape, BackendOptions(tile_policy="huge"))
        with pytest.raises(StrategyError, match="changed dma_queues"):
            kernel_options(shape, BackendOptions(tile_policy="sneaky"))
        with pytest.raises(StrategyError, match="must return a BackendOptions"):
            kernel_options(shape, BackendOptions(tile_policy="wrong"))
    tuned = BackendOptions(tile_overrides=((shape.key, (("moving_tile", 128),)),))
    assert kernel_options(shape, tuned).moving_tile == 128
    assert kernel_options(KernelShape("dot", (1, 8, 8, 8), "f32"), tuned).moving_tile == 512


def test_sweepable_options_are_checked():
    with pytest.raises(PassOptionError, match="buffers=1: expected an integer >= 2"):
        CompileOptions(buffers=1)  # single buffering: the dot kernel's prefetch would overwrite live blocks
    with pytest.raises(PassOptionError, match="dma_queues=0"):
        CompileOptions(dma_queues=0)
    with pytest.raises(PassOptionError, match="not a tile field"):
        CompileOptions(tile_overrides={"dot:1x2x3x4:f32": {"dma_queues": 2}})
    choices = CompileOptions(tile_overrides={"k": {"moving_tile": 128}}).tile_choices()
    assert choices == (("k", (("moving_tile", 128),)),)


def test_plugin_files(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(PluginError, match=r"importing it raised RuntimeError: boom \(at .*bad.py:2\)"):
        load_plugin(bad)
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(PluginError, match="registers nothing"):
        load_plugin(empty)
    with pytest.raises(PluginError, match="no such file"):
        load_plugin(tmp_path / "missing.py")
    good = tmp_path / "good.py"
    good.write_text("from backend.registry import register_tile_policy\n"
                    "register_tile_policy('test_identity')(lambda shape, options: options)\n")
    with TILE_POLICIES.scoped():
        first = load_plugin(good)
        assert first.registered == (("tile policy", "test_identity"),)
        assert load_plugin(good) is first  # once per process
        assert TILE_POLICIES.origin("test_identity") == f"plug-in {good}"
        good.write_text(good.read_text() + "# changed\n")
        assert load_plugin(good).sha256 != first.sha256  # a changed file replaces its old registrations
