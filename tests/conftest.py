from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import make_torch_venv
from tests.wheelhouse import build_wheelhouse

pytest_plugins = ["tests.remote.fixtures"]

Envlock = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path to a python interpreter of a real venv with CPU torch installed (built once)."""
    return make_torch_venv(tmp_path_factory.mktemp("torchenv") / "venv")


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's own wheels: torch 2.11.0 +cu128/+cu130, CUDA libs, deps, a polluter."""
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


def run_envlock(
    *args: str | Path,
    cwd: Path | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=input,
        env=env,
    )


@pytest.fixture
def envlock() -> Envlock:
    return run_envlock
