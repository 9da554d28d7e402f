"""The compile cache's store: keys, atomic entries, size bound, eviction (compiler/cache.py)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from compiler.cache import CompileCache, cache_key, compiler_version, default_limit, default_root


def _key(**changes):
    args = {"hlo_text": "HloModule m\n", "constants": [np.ones(3, np.float32)], "options": {"opt_level": 2},
            "target": {"name": "trn1"}, "version": "v"}
    args.update(changes)
    return cache_key(**args)


def test_key_changes_with_every_input():
    base = _key()
    assert base == _key()
    assert len({base, _key(hlo_text="HloModule n\n"), _key(constants=[np.zeros(3, np.float32)]),
                _key(constants=[np.ones(3, np.float16)]), _key(options={"opt_level": 1}),
                _key(target={"name": "trn2"}), _key(version="w")}) == 7


def test_version_hashes_the_sources():
    assert compiler_version() == compiler_version()
    assert "+" in compiler_version()


def test_root_and_limit_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURONC_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("NEURONC_CACHE_SIZE_MB", "2")
    assert default_root() == tmp_path / "c"
    assert default_limit() == 2 * 2**20
    monkeypatch.setenv("NEURONC_CACHE_SIZE_MB", "lots")
    with pytest.raises(ValueError, match="NEURONC_CACHE_SIZE_MB"):
        default_limit()


def _write(size: int):
    return lambda folder: (folder / "data.bin").write_bytes(b"x" * size)


def test_put_then_get(tmp_path):
    cache = CompileCache(tmp_path, 1 << 20)
    assert cache.get("ab" * 32) is None
    entry = cache.put("ab" * 32, _write(10))
    assert cache.get("ab" * 32) == entry
    assert (entry / "data.bin").read_bytes() == b"x" * 10
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_second_writer_of_the_same_key_succeeds(tmp_path):
    cache = CompileCache(tmp_path, 1 << 20)
    first = cache.put("cd" * 32, _write(10))
    second = cache.put("cd" * 32, _write(20))
    assert first == second and (first / "data.bin").stat().st_size == 10


def test_a_failed_write_leaves_nothing(tmp_path):
    cache = CompileCache(tmp_path, 1 << 20)

    def fail(folder):
        (folder / "half").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        cache.put("ef" * 32, fail)
    assert cache.get("ef" * 32) is None
    assert cache.entries() == []
    assert not list((tmp_path / "ef").iterdir())


def test_least_recently_used_entries_go_first(tmp_path):
    cache = CompileCache(tmp_path, 250)
    keys = [f"{i:02d}" * 32 for i in range(3)]
    for i, key in enumerate(keys[:2]):
        cache.put(key, _write(100))
        os.utime(cache.entry(key), (time.time() - 100 + i, time.time() - 100 + i))
    assert cache.get(keys[0]) is not None  # used now: keys[1] is the least recently used
    cache.put(keys[2], _write(100))
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
    assert cache.size() <= 250


def test_an_entry_larger_than_the_bound_is_kept_until_the_next_store(tmp_path):
    cache = CompileCache(tmp_path, 10)
    cache.put("aa" * 32, _write(100))
    assert cache.get("aa" * 32) is not None
    cache.put("bb" * 32, _write(100))
    assert cache.get("aa" * 32) is None and cache.get("bb" * 32) is not None
