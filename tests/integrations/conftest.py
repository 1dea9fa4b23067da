"""The trackers' own libraries in a venv of their own, and one real generation for the trainer
callbacks' tests: CPU torch (the machine's find-links)
with transformers, accelerate and Lightning (PyPI), locked and applied once per session.

uv installs from the session's cache (tests/conftest.py), so the build is one download of
each wheel and hardlinks. The callbacks' scripts run under `envlock run` (or the generation's
python directly) with their bytecode kept in one prefix for the session: this machine sets
PYTHONDONTWRITEBYTECODE, and recompiling torch and transformers would cost every run ~15 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_envlock
from tests.projects import torch_profile_text
from tests.support import UV

# What resolved on 2026-12-05 next to torch 2.13.0+cpu (transformers and accelerate as the
# checkpoint layouts use them: tests/layouts_factory.py).
# mlflow-skinny: a callback's trackers= hands each snapshot to MLflow (its file store).
TRAINER_PACKAGES = (
    "transformers==5.24.0",
    "accelerate==1.15.0",
    "lightning==2.6.6",
    "mlflow-skinny==3.17.2",
)
# Secrets a run is given, in its environment and its arguments: none may reach a snapshot.
SECRETS = {"HF_TOKEN": "hf_envlocktestsecret0001", "WANDB_API_KEY": "wandbtestsecret0002"}


class TrainerProject:
    """train.toml with the trainers, applied; a [data] corpus; runs as a user starts them."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.profile = directory / "train.toml"
        self.python = directory / "root" / "current" / "bin" / "python"
        corpus = directory / "corpus"
        corpus.mkdir(parents=True)
        (corpus / "part-0.txt").write_text("the profile's dataset\n")
        extra = f'[data]\ncorpus = "{corpus}"\n'
        self.profile.write_text(torch_profile_text("train", packages=TRAINER_PACKAGES, extra=extra))
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("ENVLOCK_")
        }
        self.env.update(SECRETS, PYTHONPYCACHEPREFIX=str(directory / "pycache"))
        self.env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self.env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")  # nothing downloaded
        self.env.update(MLFLOW_ALLOW_FILE_STORE="true")  # MLflow 3's file store, asked for
        started = time.monotonic()
        for args in (("lock", self.profile), ("apply", "-y", self.profile)):
            result = run_envlock(*args, env=self.env)
            assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
        self.build_seconds = time.monotonic() - started

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        """`envlock run train.toml -- ARGV` from the project directory."""
        result = run_envlock("run", self.profile, "--", *argv, cwd=self.dir, env=self.env)
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def write_data(self, name: str, rows: int) -> Path:
        """A JSONL training set of `rows` sequences of 8 token ids (the HF example's input)."""
        path = self.dir / "data" / name
        path.parent.mkdir(exist_ok=True)
        lines = [
            json.dumps({"input_ids": [(i * 7 + j) % 64 for j in range(8)]}) for i in range(rows)
        ]
        path.write_text("\n".join(lines) + "\n")
        return path


@pytest.fixture(scope="session")
def trainer_project(tmp_path_factory: pytest.TempPathFactory) -> TrainerProject:
    return TrainerProject(tmp_path_factory.mktemp("trainers") / "project")


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
