"""The compile cache's trace key (frontend/trace_key.py): a torch model is found in the cache before it is
captured, and anything that changes what torch.export would produce changes the key."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
import torch

import compiler
import compiler.driver
from compiler.cache import CompileCache
from frontend.trace_key import tensor_digest, trace_key

SCALE = 2.0


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.offset = torch.full((4,), 0.5)  # a plain attribute, not a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * SCALE + self.offset


class Branchy(torch.nn.Module):
    def __init__(self, exporting: float) -> None:
        super().__init__()
        self.exporting = exporting

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():  # the trace runs as export does: this branch
            return x * self.exporting
        return x * 3.0


class DictOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor, scale: int = 1) -> dict[str, torch.Tensor]:
        y = self.fc(x) * scale
        return {"logits": y, "masked": y * mask}


def _example():
    torch.manual_seed(0)
    return Scaled().eval(), (torch.randn(2, 8),)


def test_the_key_is_stable_and_follows_everything_the_program_depends_on(monkeypatch):
    model, example = _example()
    base = trace_key(model, example)
    assert base is not None and base == trace_key(model, example)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)  # a global the forward reads
    assert trace_key(model, example) != base
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 2.0)
    assert trace_key(model, example) == base
    changes = []
    with torch.no_grad():  # the trace runs in the caller's grad mode, as export does
        changes.append(trace_key(model, example))
    with torch.no_grad():
        saved = model.fc.weight.clone()
        model.fc.weight[0, 0] += 1  # a parameter's value
        changes.append(trace_key(model, example))
        model.fc.weight.copy_(saved)
    assert trace_key(model, example) == base
    model.offset = torch.full((4,), 0.25)  # a plain tensor attribute's value
    changes.append(trace_key(model, example))
    model.offset = torch.full((4,), 0.5)
    changes.append(trace_key(model, (torch.randn(3, 8),)))  # another input shape
    changes.append(trace_key(model, (torch.randn(2, 8, dtype=torch.float64),)))
    model.fc2 = model.fc  # the module tree (and so the names in the program)
    changes.append(trace_key(model, example))
    assert len({base, *changes}) == len(changes) + 1


def test_code_under_is_exporting_is_traced_as_export_runs_it():
    x = (torch.randn(4),)
    assert trace_key(Branchy(2.0), x) != trace_key(Branchy(4.0), x)


def test_what_cannot_be_traced_has_no_key_and_still_compiles():
    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x  # reads data: fake tensors cannot

    assert trace_key(DataDependent(), (torch.randn(4),)) is None
    assert trace_key(lambda x: x, (torch.randn(4),)) is None


def test_tensor_digest_follows_the_values_however_they_change():
    t = torch.arange(10, dtype=torch.float32)
    first = tensor_digest(t)
    assert tensor_digest(t) == first
    t.data[0] = 5.0  # through .data: the version counter does not see it
    second = tensor_digest(t)
    assert second != first
    t.numpy()[0] = 6.0  # nor through numpy
    assert tensor_digest(t) not in (first, second)
    assert tensor_digest(torch.zeros(2, dtype=torch.bfloat16)) != tensor_digest(torch.zeros(2, dtype=torch.float16))
    huge = torch.ones(1).expand(70000, 70000)  # 4 bytes in memory: hashed without a copy
    assert tensor_digest(huge) != tensor_digest(torch.full((1,), 2.0).expand(70000, 70000))
    square = torch.arange(6.0).reshape(2, 3)
    assert tensor_digest(square.t()) != tensor_digest(square.t().contiguous())  # strides are in the digest
    assert tensor_digest(square[:, 1]) != tensor_digest(square[:, 2])


def test_tensor_digest_of_a_strided_view_reads_only_its_storage():
    huge = torch.zeros(1).expand(70000, 70000)  # 19.6 GB if it were materialised
    assert tensor_digest(huge) != tensor_digest(torch.zeros(1).expand(70000, 69999))
    x = torch.arange(12.0).reshape(3, 4)
    assert tensor_digest(x.t()) != tensor_digest(x)
    assert tensor_digest(x[:, 1:]) != tensor_digest(x[:, :3])
    assert tensor_digest(x.t()) == tensor_digest(x.clone().t())


def test_a_hit_by_trace_gives_the_same_program_and_calling_convention():
    torch.manual_seed(1)
    model = DictOut().eval()
    x, mask = torch.randn(2, 8), torch.ones(2, 4)
    first = compiler.compile(model, (x,), example_kwargs={"mask": mask, "scale": 2}, quiet=True)
    second = compiler.compile(model, (x,), example_kwargs={"mask": mask, "scale": 2}, quiet=True)
    assert first.compile_stats.cache.startswith("miss") and "by trace" in second.compile_stats.cache
    assert [p.name for p in second.compile_stats.phases] == ["cache lookup (trace)"]  # no capture
    assert second.asm == first.asm and second.hlo == first.hlo
    out = second(x, mask=mask, scale=2)
    with torch.no_grad():
        expected = model(x, mask=mask, scale=2)
    assert set(out) == {"logits", "masked"}
    for k in out:
        np.testing.assert_allclose(out[k].numpy(), expected[k].numpy(), rtol=1e-4, atol=1e-4)
    other = compiler.compile(model, (x,), example_kwargs={"mask": mask, "scale": 3}, quiet=True)
    assert other.compile_stats.cache.startswith("miss")  # a non-tensor argument is part of the key


def test_a_changed_global_is_not_served_the_old_program(monkeypatch):
    model, example = _example()
    compiler.compile(model, example, quiet=True)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 5.0)
    exe = compiler.compile(model, example, quiet=True)
    assert exe.compile_stats.cache.startswith("miss")
    with torch.no_grad():
        np.testing.assert_allclose(exe(*example).numpy(), model(*example).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weights", ["inline", "external"])
def test_a_saved_neff_keeps_the_calling_convention(tmp_path, weights):
    torch.manual_seed(2)
    model = DictOut().eval()
    x, mask = torch.randn(2, 8), torch.ones(2, 4)
    exe = compiler.compile(model, (x,), example_kwargs={"mask": mask}, cache=False, quiet=True)
    exe.save(tmp_path / "m.neff", weights=weights)
    loaded = compiler.load(tmp_path / "m.neff")
    assert loaded.signature == exe.signature
    out = loaded(x, mask=mask)
    np.testing.assert_array_equal(out["masked"].numpy(), exe(x, mask=mask)["masked"].numpy())


def test_torch_compile_finds_a_graph_compiled_before_by_its_trace(monkeypatch):
    programs = []
    run = compiler.driver.Executable.run

    def recording(self, *inputs, **kwargs):
        programs.append(self)
        return run(self, *inputs, **kwargs)

    monkeypatch.setattr(compiler.driver.Executable, "run", recording)
    model, (x,) = _example()
    with torch.no_grad():
        expected = model(x)
        for _ in range(2):  # the second time in a fresh dynamo, as in a new process
            torch._dynamo.reset()
            np.testing.assert_allclose(torch.compile(model, backend="neuronc")(x).numpy(), expected.numpy(),
                                       rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
    first, second = programs
    assert first.compile_stats.cache.startswith("miss") and "by trace" in second.compile_stats.cache
    assert second.asm == first.asm


def test_an_alias_whose_program_was_evicted_is_a_miss_and_is_stored_again():
    model, example = _example()
    compiler.compile(model, example, quiet=True)
    cache = CompileCache.default()
    (program,) = [path for _, _, path in cache.entries() if (path / "program.neff").exists()]
    shutil.rmtree(program)
    again = compiler.compile(model, example, quiet=True)
    assert again.compile_stats.cache.startswith("miss")
    third = compiler.compile(model, example, quiet=True)
    assert "by trace" in third.compile_stats.cache and third.asm == again.asm
