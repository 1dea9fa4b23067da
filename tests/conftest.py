from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import mountns
from tests.support import make_torch_venv
from tests.wheelhouse import build_pypi_wheelhouse, build_wheelhouse

pytest_plugins = ["tests.remote.fixtures", "tests.remote.docker_fixtures"]

Envlock = Callable[..., subprocess.CompletedProcess[str]]


def pytest_configure(config: pytest.Config) -> None:
    """One fresh uv cache for the whole session, exported before anything runs uv, so that
    every uv (the tests', envlock's, the agent's on local targets) inherits it: no test
    depends on this machine's uv cache, nor on what another session left in it."""
    os.environ["UV_CACHE_DIR"] = tempfile.mkdtemp(prefix="envlock-tests-uv-cache-")
    # A shell without job control starts a background command with SIGINT ignored, and an
    # ignored signal stays ignored across exec: every envlock the suite starts would then
    # ignore the Ctrl-C its interrupt tests send (an apply ran to its end, exit 0). A handler
    # here is reset to the default in each child instead.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# What a test needs beyond Python and uv, named by the fixtures that set it up: each is a
# marker, so `-m "not lxc"` (or sshd, lazyfs, pve, docker) deselects the tests that need it.
# A test's fixtures are read whole (the fixtures its fixtures use included), so a test that
# reaches a container through a helper fixture is marked as well. Every test under tests/unit
# is `unit`.
NEEDS = {
    "lxc": {"lxc_container", "rootfs_tarball"},
    "sshd": {"node_sshd", "bare_node_sshd"},
    "lazyfs": {"lazyfs_bin", "lazy"},
    "pve": {"fakepve", "fakepve_url", "pve_api"},
    "tmpfs": {"tmpfs"},
    "docker": {
        "docker_engine",
        "docker_image",
        "docker_container",
        "second_engine",
        "vfs_engine",
        "other_engine",
        "docker_sshd",
    },
    "trainers": {"trainer_project"},
}
UNIT = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in NEEDS.items():
            if names & fixtures:
                item.add_marker(marker)
        if UNIT in Path(str(item.fspath)).resolve().parents:
            item.add_marker("unit")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ.pop("UV_CACHE_DIR"), ignore_errors=True)


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path to a python interpreter of a real venv with CPU torch installed (built once)."""
    return make_torch_venv(tmp_path_factory.mktemp("torchenv") / "venv")


@pytest.fixture(scope="session")
def layouts(torch_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every layout, written once per session by transformers 5.24.0 and accelerate 1.15.0
    (installed into the torch venv from PyPI: see layouts_factory.HF_PACKAGES); shared by
    test_checkpoint_layouts.py and test_diff_truth.py."""
    from tests import layouts_factory

    layouts_factory.install_hf(torch_python)
    return layouts_factory.make_layouts(torch_python, tmp_path_factory.mktemp("layouts"))


@pytest.fixture(scope="session")
def variants(
    torch_python: Path, layouts: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    """Every pair of test_diff_truth.py, written once per session in one torch process
    (diff_variants.py); test_diff_coverage.py checks its property over them too."""
    from tests import diff_variants

    made = tmp_path_factory.mktemp("diff-variants")
    return diff_variants.make_variants(torch_python, layouts["root"], made)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's own wheels: torch 2.11.0 +cu128/+cu130, CUDA libs, deps, a polluter."""
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture(scope="session")
def pypi_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PyPI's own torch builds (2.9.1, 2.10.0: CUDA 12.8; 2.11.0, 2.14.1: CUDA 13.0, no
    label), their libraries, sglang 0.5.23 (pins torch 2.14.1) and 0.5.2, mirrored small."""
    return build_pypi_wheelhouse(tmp_path_factory.mktemp("pypi-wheelhouse"))


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


# The host's own device files, which no test may replace: as root, a regressed rename onto
# one of them (a test linking to the real /dev/null) breaks every later shell on the machine.
HOST_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
CHECKOUT = Path(__file__).resolve().parent.parent


def damaged_devices() -> list[str]:
    return [path for path in HOST_DEVICES if not stat.S_ISCHR(os.lstat(path).st_mode)]


def untracked_files() -> set[str] | None:
    """The checkout's untracked files (ignored ones aside); None outside a git checkout."""
    listed = subprocess.run(
        ["git", "-C", str(CHECKOUT), "ls-files", "--others", "--exclude-standard", "-z"],
        capture_output=True,
    )
    if listed.returncode != 0:
        return None
    return {name.decode(errors="replace") for name in listed.stdout.split(b"\0") if name}


@pytest.fixture(autouse=True)
def json_state_of_its_own() -> Iterator[None]:
    """Each test starts with envlock.ui's --json state unset (an in-process CLI call with
    --json sets it for the rest of the process)."""
    from envlock import ui

    ui.JSON.asked, ui.JSON.emitted, ui.JSON.last_error = False, False, None
    yield


@pytest.fixture
def private_mounts(tmp_path: Path) -> Iterator[bool]:
    """For a test that stages races: a mount namespace of its own where the kernel allows
    it, the host's device files covered by the test's own nodes (tests/mountns.py)."""
    with mountns.private_mounts(tmp_path / "own-devices") as private:
        yield private


@pytest.fixture(scope="module", autouse=True)
def machine_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Before and after every test module: the host's devices are still devices and the
    checkout has no new untracked files. A module that breaks either fails, by name."""
    module = request.node.nodeid
    broken = damaged_devices()
    if broken:
        pytest.fail(f"before {module}: {', '.join(broken)} is no longer a character device")
    before = untracked_files()
    yield
    broken = damaged_devices()
    if broken:
        pytest.fail(f"{module} replaced the host's {', '.join(broken)} (not a device any more)")
    after = untracked_files()
    if before is not None and after is not None and after - before:
        new = ", ".join(repr(name) for name in sorted(after - before))
        pytest.fail(f"{module} wrote into the checkout: new untracked {new}")
