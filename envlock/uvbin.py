"""The uv binary envlock drives: the one shipped in the `uv` wheel envlock depends on."""

from __future__ import annotations

import functools
import os

from envlock.errors import OperationError


@functools.lru_cache(maxsize=1)
def uv_path() -> str:
    """Absolute path of uv: $ENVLOCK_UV, else the uv package's binary, else uv on PATH."""
    override = os.environ.get("ENVLOCK_UV")
    if override:
        return override
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        import shutil

        found = shutil.which("uv")
        if found:
            return found
    raise OperationError("uv not found", hint="reinstall envlock (it depends on the uv package)")


@functools.lru_cache(maxsize=1)
def uv_version() -> str:
    """The version of the uv envlock ships (from the package metadata: no subprocess)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("uv")
    except PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def uv_sha256() -> str:
    """sha256 of the uv binary pushed to remote targets (computed once, when pushing)."""
    import hashlib

    digest = hashlib.sha256()
    with open(uv_path(), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
