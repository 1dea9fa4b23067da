"""Real CUDA builds, end to end: PyPI's unlabelled torch, sglang installed over a locked
torch, and the CUDA major read from torch's own libraries, never from other packages' -cuNN
names (nvidia-cutlass-dsl-libs-cu12 and -cu13).

uv locks and builds from the suite's wheelhouses (PyPI's metadata mirrored small, see
tests/wheelhouse.py), pollution is a user's offline `uv pip install`, and the CLI runs as a
user runs it. The agent's parsers and envlock.base.cuda are checked directly on real metadata.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envlock.agent import probe
from envlock.agent.probe import required_cuda_majors, version_py
from envlock.base import cuda
from envlock.base.cuda import cuda_majors, is_torch_cuda_library
from envlock.lock.read import read_lock
from tests.conftest import Envlock
from tests.projects import torch_profile_text, write_seed_project
from tests.support import uv_install
from tests.wheelhouse import cu128_requires, cu130_requires, pypi_torch_files

TORCH_VERSION = "import torch; print(torch.__version__, torch.version.cuda)"


def drift_items(result: subprocess.CompletedProcess[str]) -> dict[str, list[dict[str, str]]]:
    """check --json's drift, by kind."""
    items: dict[str, list[dict[str, str]]] = {}
    for item in json.loads(result.stdout)["drift"]:
        items.setdefault(item["kind"], []).append(item)
    return items


def venv_python(profile: Path) -> Path:
    return profile.parent / "venv" / "bin" / "python"


def applied(envlock: Envlock, profile: Path) -> Path:
    locked = envlock("lock", profile)
    assert locked.returncode == 0, locked.stderr
    result = envlock("apply", "-y", profile)
    assert result.returncode == 0, result.stderr
    assert envlock("check", profile).returncode == 0
    return profile


def profile_file(base: Path, name: str, text: str) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    (base / f"{name}.toml").write_text(text)
    return base / f"{name}.toml"


# -- the CLI ------------------------------------------------------------------------------


def test_pypi_torch_is_recorded_as_the_cuda_build_it_is(
    tmp_path: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    text = torch_profile_text(
        "pypi", torch="2.11.0", backend="pypi", find_links=(str(pypi_wheelhouse),), offline=True
    )
    profile = applied(envlock, profile_file(tmp_path / "proj", "pypi", text))
    lock = read_lock(profile.parent / "pylock.pypi.toml")
    assert lock.versions()["torch"] == "2.11.0"  # PyPI's: no label in the lock either
    assert {"cuda-toolkit", "nvidia-cublas", "nvidia-cudnn-cu13"} <= set(lock.packages)

    ran = envlock("run", profile, "--", "python", "-c", TORCH_VERSION)
    assert ran.stdout.strip() == "2.11.0+cu130 13.0", ran.stderr
    taken = envlock("snapshot", profile, tmp_path / "ckpt")
    assert taken.returncode == 0, taken.stderr
    torch = json.loads((tmp_path / "ckpt" / "envlock-snapshot.json").read_text())["torch"]
    assert torch["version"] == "2.11.0" and torch["reported"] == "2.11.0+cu130"
    assert (torch["local"], torch["cuda"], torch["cuda_requires"]) == ("cu130", "13.0", ["cu13"])


def test_sglang_over_a_cu128_lock_brings_pypis_cuda_13_torch(
    tmp_path: Path, wheelhouse: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    seed = applied(envlock, write_seed_project(tmp_path / "proj", wheelhouse))
    # `pip install sglang` today: 0.5.23 pins torch==2.14.1, PyPI's CUDA 13.0 build.
    uv_install(venv_python(seed), [pypi_wheelhouse], "sglang==0.5.23")

    check = envlock("check", "--json", seed)
    assert check.returncode == 1
    items = drift_items(check)
    (torch,) = items["torch-build"]
    assert (torch["expected"], torch["actual"]) == (
        "2.11.0+cu128",
        "2.14.1 (PyPI build, CUDA 13.0)",
    )
    assert "no label" not in torch["detail"]
    (cuda,) = items["cuda-libraries"]
    folded = set(cuda["dist"].split(","))
    assert {"cuda-toolkit", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"} <= folded
    extras = {item["subject"] for item in items["package-extra"]}
    assert {"nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13"} <= extras
    assert "sglang" in extras and not extras & folded
    human = envlock("check", seed)
    assert "2.11.0+cu128 → 2.14.1 (PyPI build, CUDA 13.0)" in human.stdout

    repaired = envlock("apply", "-y", seed)
    assert repaired.returncode == 0, repaired.stderr
    assert envlock("check", seed).returncode == 0
    ran = envlock("run", seed, "--", "python", "-c", TORCH_VERSION)
    assert ran.stdout.strip() == "2.11.0+cu128 12.8"


def test_cuda_major_change_is_seen_past_the_cutlass_dsl_libraries(
    tmp_path: Path, wheelhouse: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    # A cu128 lock with flashinfer[cu13]: its cutlass DSL puts -cu12 and -cu13 names in it.
    text = torch_profile_text(
        "flash",
        torch="2.11.0",
        backend="cu128",
        packages=("trainutil", "flashinfer-python[cu13]==0.7.2"),
        find_links=(str(wheelhouse), str(pypi_wheelhouse)),
        offline=True,
    )
    profile = applied(envlock, profile_file(tmp_path / "proj", "flash", text))
    locked = set(read_lock(profile.parent / "pylock.flash.toml").packages)
    assert {"nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13"} <= locked

    uv_install(venv_python(profile), [pypi_wheelhouse], "sglang==0.5.23")
    items = drift_items(envlock("check", "--json", profile))
    (cuda,) = items["cuda-libraries"]
    assert (cuda["expected"], cuda["actual"]) == ("nvidia-*-cu12", "nvidia-*-cu13")
    assert "cutlass" not in cuda["dist"]


# -- the agent's reading of torch, and envlock.base.cuda, on real metadata ---------------------


@pytest.mark.parametrize(
    ("requires", "majors"),
    [
        (cu128_requires("3.3.20", "3.5.1"), {"12"}),  # torch 2.9.1
        (cu128_requires("3.4.5", "3.6.0", ("cuda-bindings==12.9.4",)), {"12"}),  # 2.10.0
        (cu130_requires("3.6.0"), {"13"}),  # 2.11.0: cuda-toolkit, cuda-bindings, -cu13
        (["nvidia-cublas==13.1.0.3", "nvidia-cufft==12.0.0.61"], {"13"}),
        (["nvidia-cuda-runtime~=13.0.48; platform_system == 'Linux'"], {"13"}),
        # Not torch's CUDA: other families, optional extras, unversioned names.
        (["nvidia-cutlass-dsl-libs-cu12==4.8.0", "nvidia-cutlass-dsl-libs-cu13"], set()),
        (['nvidia-nccl-cu13==2.28.9; extra == "distributed"', "filelock"], set()),
        (["nvidia-cufft==12.0.0.61", "cuda-bindings"], set()),
    ],
)
def test_the_agent_reads_torchs_cuda_from_its_own_requirements(
    requires: list[str], majors: set[str]
) -> None:
    assert required_cuda_majors(requires) == majors


@pytest.mark.parametrize("annotated", [False, True])
def test_the_agent_reads_version_py_with_or_without_annotations(
    tmp_path: Path, annotated: bool
) -> None:
    path = tmp_path / "version.py"
    path.write_text(pypi_torch_files("2.11.0", "13.0", annotated=annotated)["torch/version.py"])
    found = version_py(str(path))
    assert found == {
        "reported": "2.11.0+cu130",
        "cuda": "13.0",
        "hip": None,
        "git_version": "envlock-test",
    }
    assert version_py(str(tmp_path / "missing.py")) == {}


@pytest.mark.parametrize(
    ("packages", "majors"),
    [
        ({"nvidia-cublas-cu12": "12.8.4.1", "nvidia-cudnn-cu12": "9.10.2.21"}, {"12"}),
        ({"cuda-toolkit": "13.0.2", "nvidia-cublas": "13.1.0.3"}, {"13"}),
        ({"nvidia-cufft": "12.0.0.61", "nvidia-curand": "10.4.0.35"}, set()),
        ({"nvidia-cutlass-dsl-libs-cu12": "4.8", "nvidia-cutlass-dsl-libs-cu13": "4.8"}, set()),
        ({"nvidia-cudnn-frontend": "1.18.0", "cuda-bindings": "13.2.0"}, set()),
    ],
)
def test_a_locks_cuda_major_comes_from_torchs_library_families(
    packages: dict[str, str], majors: set[str]
) -> None:
    assert cuda_majors(packages) == majors


def test_torchs_cuda_library_families() -> None:
    mine = ["nvidia-cublas", "nvidia-cufft", "nvidia-nccl-cu13", "cuda-toolkit"]
    others = ["nvidia-cutlass-dsl-libs-cu13", "nvidia-cudnn-frontend", "cuda-bindings"]
    assert [is_torch_cuda_library(n) for n in mine + others] == [True] * 4 + [False] * 3


def test_the_agent_and_envlock_read_one_rule_of_families() -> None:
    # Written once, in the agent (agent/cuda.py): the probe reads torch's requirements with
    # the function envlock reads locks with.
    assert probe.cuda_major is cuda.cuda_major
    assert probe.TORCH_PINNED == ("cuda-toolkit", "cuda-bindings")
