"""The Profile type and its parts (torch, dependencies, scripts): the declared environment
as frozen values, made by profile.py's reader once everything in the file passed."""

from __future__ import annotations

import glob
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envlock.base.untrusted import read_named
from envlock.profile.sources import DataSource
from envlock.targets.base import Target

if TYPE_CHECKING:
    from envlock.proxmox.settings import Container

PYTORCH_INDEX = "https://download.pytorch.org/whl"


@dataclass(frozen=True)
class TorchSpec:
    version: str
    backend: str
    index_url: str | None = None
    packages: tuple[str, ...] = ()

    @property
    def local_label(self) -> str | None:
        """The local label the backend's wheels carry (`cu128`, `rocm6.4`), None for PyPI's."""
        return None if self.backend == "pypi" else self.backend

    @property
    def pinned_version(self) -> str:
        label = self.local_label
        return f"{self.version}+{label}" if label and "+" not in self.version else self.version

    @property
    def backend_index(self) -> str | None:
        if self.index_url:
            return self.index_url
        return None if self.backend == "pypi" else f"{PYTORCH_INDEX}/{self.backend}"

    def requirements(self) -> list[str]:
        return [f"torch=={self.pinned_version}", *self.packages]


@dataclass(frozen=True)
class Dependencies:
    packages: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    offline: bool = False
    # Packages that may be built from their sdist (normalised names); all else is wheels.
    build: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scripts:
    source: Path
    dest: str
    files: tuple[str, ...]

    def resolve(self) -> list[Path]:
        """Every script file the globs match, sorted, relative paths under `source`."""
        found: set[Path] = set()
        for pattern in self.files:
            matches = [Path(p) for p in glob.glob(str(self.source / pattern), recursive=True)]
            found.update(m.relative_to(self.source) for m in matches if m.is_file())
        return sorted(found)


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    description: str
    target: Target
    python_version: str
    python_platform: str
    torch: TorchSpec | None
    dependencies: Dependencies
    cache_dir: str
    env: dict[str, str]
    scripts: Scripts | None
    container: Container | None
    # [python] download: whether uv may download a managed CPython for the environment.
    python_download: bool = False
    # [run] pass-env: variables `envlock run` passes through from the caller's environment.
    pass_env: tuple[str, ...] = ()
    # [gpu] count: how many GPUs the environment expects to see; None when not declared.
    gpu_count: int | None = None
    # [data]: the datasets a run reads (name -> a source of a kind in profile/sources.py:
    # a file, directory or glob on the target), fingerprinted by snapshots and `envlock data`.
    data: dict[str, DataSource] = field(default_factory=dict)
    sha256: str = field(repr=False, default="")

    @property
    def lock_path(self) -> Path:
        return self.path.parent / f"pylock.{self.name}.toml"

    def script_hashes(self) -> dict[str, str]:
        """sha256 of every pinned script source, keyed by its path relative to `source`."""
        if self.scripts is None:
            return {}
        return {
            str(rel): hashlib.sha256(read_named(self.scripts.source / rel, "script")).hexdigest()
            for rel in self.scripts.resolve()
        }
