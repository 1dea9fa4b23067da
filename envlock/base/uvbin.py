"""The uv binary envlock drives: the one shipped in the `uv` wheel envlock depends on."""

from __future__ import annotations

import functools
import os
import sys

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
    """The version of the uv envlock ships (from the package metadata: no subprocess).

    Read from the first `uv-*.dist-info/METADATA` on sys.path, as importlib.metadata finds
    it: that module loads ~50 others (email, zipfile, csv, socket…), on every remote probe."""
    for entry in sys.path:
        found = dist_info_version(entry or ".", "uv")
        if found is not None:
            return found
    from importlib.metadata import PackageNotFoundError, version  # an installation unlike any

    try:
        return version("uv")
    except PackageNotFoundError:
        return "unknown"


def dist_info_version(directory: str, name: str) -> str | None:
    """`Version:` of the distribution `name`'s dist-info in `directory`, if it is there."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for entry in names:
        base, _, ext = entry.partition("-")
        if base.lower().replace("_", "-") != name or not ext.endswith(".dist-info"):
            continue
        try:
            # own: the uv wheel's metadata on envlock's own sys.path
            with open(os.path.join(directory, entry, "METADATA"), encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip()
                    if not line.strip():
                        break  # the headers end: no version said
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def uv_sha256() -> str:
    """sha256 of the uv binary pushed to remote targets (computed once, when pushing)."""
    import hashlib

    digest = hashlib.sha256()
    # own: envlock's uv binary
    with open(uv_path(), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
