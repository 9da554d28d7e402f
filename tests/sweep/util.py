"""Tiny model files for the sweep tests (written to a temp folder: they are the user's files)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TINY = '''
import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, {width}), nn.ReLU(), nn.Linear({width}, 16)).eval()
    return model, (torch.randn(8, 32),)
'''

# Kills its worker process the first time it is imported on this machine, then behaves (a flaky worker).
CRASH_ONCE = '''
import os
from pathlib import Path

import torch
from torch import nn

MARK = Path({mark!r})
if not MARK.exists():
    MARK.write_text("crashed once")
    os._exit(9)


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16)).eval(), (torch.randn(4, 16),)
'''

CRASH_ALWAYS = '''
import os

os._exit(9)
'''


def write_model(folder: Path, name: str, width: int = 64) -> str:
    path = folder / f"{name}.py"
    path.write_text(TINY.format(width=width))
    return str(path)


def sweep_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "compiler.sweep", *args]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_sweep_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_command(*args), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
