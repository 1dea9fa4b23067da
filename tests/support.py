"""Helpers shared by the test suite: where wheels come from, real uv, real venvs."""

from __future__ import annotations

import configparser
import os
import subprocess
from pathlib import Path

from uv import find_uv_bin

UV = find_uv_bin()
TORCH_CPU_VERSION = os.environ.get("ENVLOCK_TEST_TORCH", "2.13.0+cpu")


def machine_find_links() -> list[str]:
    """The find-links this machine's pip is configured with (env first, then pip.conf files)."""
    found: list[str] = []
    for var in ("UV_FIND_LINKS", "PIP_FIND_LINKS"):
        found += [p for p in os.environ.get(var, "").replace(",", " ").split() if p]
    parser = configparser.ConfigParser()
    parser.read(
        [
            "/etc/pip.conf",
            "/etc/xdg/pip/pip.conf",
            os.path.expanduser("~/.config/pip/pip.conf"),
            os.path.expanduser("~/.pip/pip.conf"),
        ]
    )
    for section in ("global", "install"):
        if parser.has_option(section, "find-links"):
            found += parser.get(section, "find-links").split()
    return list(dict.fromkeys(found))


def make_torch_venv(dest: Path) -> Path:
    """A real venv with CPU torch in it; returns its python. Fails loudly if torch can't be had."""
    subprocess.run([UV, "venv", "-q", "--python", "3.11", str(dest)], check=True)
    python = dest / "bin" / "python"
    argv = [UV, "pip", "install", "-q", "--python", str(python), f"torch=={TORCH_CPU_VERSION}"]
    for link in machine_find_links():
        argv += ["--find-links", link]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"could not install torch=={TORCH_CPU_VERSION} into a test venv "
            f"(find-links: {machine_find_links() or 'none'}):\n{proc.stderr}"
        )
    return python
