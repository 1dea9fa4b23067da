"""Helpers shared by the test suite: where wheels come from, real uv, real venvs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from uv import find_uv_bin

from envlock.lock.links import environment_find_links

UV = find_uv_bin()
TORCH_CPU_VERSION = os.environ.get("ENVLOCK_TEST_TORCH", "2.13.0+cpu")


def machine_find_links() -> list[str]:
    """The find-links this machine's pip and uv are configured with."""
    return environment_find_links()


def make_torch_venv(dest: Path, *, compile_bytecode: bool = False) -> Path:
    """A real venv with CPU torch in it; returns its python. Fails loudly if torch can't be had.

    torch comes from the machine's find-links; its pure-Python requirements (sympy, jinja2,
    …) from PyPI, so this install cannot be offline: under the suite's fresh uv cache they
    are fetched once per session. Benchmarks compile bytecode, so that `import torch` costs
    what it does on a normal machine even where PYTHONDONTWRITEBYTECODE is set (as on this
    project's machines)."""
    venv = [UV, "venv", "-q", "--offline", "--no-python-downloads", "--python", "3.11"]
    subprocess.run([*venv, str(dest)], check=True)
    python = dest / "bin" / "python"
    argv = [UV, "pip", "install", "-q", "--python", str(python), f"torch=={TORCH_CPU_VERSION}"]
    if compile_bytecode:
        argv.append("--compile-bytecode")
    for link in machine_find_links():
        argv += ["--find-links", link]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"could not install torch=={TORCH_CPU_VERSION} into a test venv "
            f"(find-links: {machine_find_links() or 'none'}):\n{proc.stderr}"
        )
    return python


def uv_install(python: Path, wheelhouses: list[Path], *requirements: str) -> None:
    """A user's `uv pip install` straight into a live venv: offline, and from the given
    test wheelhouses only (never an index, nor metadata an index left in a uv cache)."""
    argv = [UV, "pip", "install", "-q", "--python", str(python), "--offline", "--no-index"]
    for wheelhouse in wheelhouses:
        argv += ["--find-links", str(wheelhouse)]
    subprocess.run([*argv, *requirements], check=True)


def ctrl_c_during_install(
    profile: Path, *, timeout: int, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """`envlock apply -y PROFILE`, interrupted as a terminal's Ctrl-C does (SIGINT to its
    process group, envlock and ssh) once it installs the lock's packages: its exit code, its
    stdout, and its stderr (what it said before the signal, then after)."""
    apply = subprocess.Popen(
        [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    assert apply.stderr is not None
    said = [apply.stderr.readline()]
    while "packages from the lock" not in said[-1] and said[-1]:
        said.append(apply.stderr.readline())
    time.sleep(0.3)
    os.killpg(apply.pid, signal.SIGINT)
    out, err = apply.communicate(timeout=timeout)
    return apply.returncode, out, "".join(said) + err
