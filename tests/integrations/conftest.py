"""The trackers' own libraries, pinned, in a venv of their own built once per session."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support import UV

# What resolved on 2026-12-05 (PyPI): MLflow's client without its server (its file store
# works), and W&B, whose offline mode writes runs to disk with no login and no network.
TRACKER_PACKAGES = ("mlflow-skinny==3.17.2", "wandb==0.31.0")


@pytest.fixture(scope="session")
def tracker_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A python with mlflow-skinny and wandb (and no envlock: a training environment's)."""
    venv = tmp_path_factory.mktemp("trackers") / "venv"
    began = time.monotonic()
    make = [UV, "venv", "-q", "--no-python-downloads", "--python", "3.11", str(venv)]
    subprocess.run(make, check=True)
    python = venv / "bin" / "python"
    install = [UV, "pip", "install", "-q", "--python", str(python), *TRACKER_PACKAGES]
    proc = subprocess.run(install, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"could not install {TRACKER_PACKAGES}:\n{proc.stderr}")
    print(f"tracker venv built in {time.monotonic() - began:.1f} s")
    return python
