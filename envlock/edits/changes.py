"""What moves between two locks, grouped as `envlock diff` groups it: the torch build, CUDA
libraries, packages added / changed / removed, with download sizes where the lock says."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from envlock.base.cuda import is_cuda_library, is_torch_cuda_library
from envlock.lock.read import Lock, LockedPackage
from envlock.profile.read import TORCH_FAMILY
from envlock.runs.diff import Change, Side, compare, mapping_changes


@dataclass(frozen=True)
class LockChanges:
    torch: tuple[Change, ...] = ()
    cuda: tuple[Change, ...] = ()
    packages: tuple[Change, ...] = ()
    sizes: tuple[tuple[str, int], ...] = ()  # name -> wheel bytes (of the side it ends on)

    @property
    def empty(self) -> bool:
        return not (self.torch or self.cuda or self.packages)

    def size_of(self, name: str) -> int | None:
        return dict(self.sizes).get(name)

    def of_kind(self, kind: str) -> tuple[Change, ...]:
        return tuple(c for c in self.packages if c.kind == kind)


def lock_changes(current: Lock, candidate: Lock) -> LockChanges:
    """The differences `envlock diff` would show between the two locks, regrouped: the torch
    build without its folded CUDA list, each CUDA library on its own line."""
    groups = {g.name: g for g in compare(Side("current", current), Side("new", candidate))}
    torch = tuple(c for c in changes_of(groups, "torch build") if c.key != "CUDA libraries")
    shown = {c.key for c in torch}  # triton is reported with the torch build
    packages = tuple(c for c in changes_of(groups, "packages") if c.key not in shown)
    cuda = mapping_changes(cuda_libraries(current), cuda_libraries(candidate))
    moved = [c.key for c in (*cuda, *packages)]
    sizes = tuple((name, n) for name in moved if (n := moved_size(name, current, candidate)))
    return LockChanges(torch, cuda, packages, sizes)


def changes_of(groups: dict, name: str) -> tuple[Change, ...]:
    group = groups.get(name)
    return group.changes if group is not None else ()


def cuda_libraries(lock: Lock) -> dict[str, str]:
    return {name: v for name, v in lock.versions().items() if is_cuda_library(name)}


# -- torch's own packages -------------------------------------------------------------------
def is_torch_bound(name: str) -> bool:
    """torch, the packages PyTorch publishes with it (triton, torchvision, …) and the CUDA
    libraries its builds pin (envlock.base.cuda's families, cuda-toolkit, cuda-bindings)."""
    return (
        name == "torch"
        or name in TORCH_FAMILY
        or is_torch_cuda_library(name)
        or name.startswith("cuda-")
    )


def torch_moves(current: Lock, candidate: Lock) -> list[str]:
    """Each torch-bound package whose version would move, as `name: old → new`."""
    a, b = current.versions(), candidate.versions()
    moved = sorted(n for n in set(a) | set(b) if is_torch_bound(n) and a.get(n) != b.get(n))
    return [f"{n}: {a.get(n, '—')} → {b.get(n, '—')}" for n in moved]


# -- sizes --------------------------------------------------------------------------------
def moved_size(name: str, current: Lock, candidate: Lock) -> int | None:
    """Bytes to download for the side a package ends on (the old one when removed)."""
    lock = candidate if name in candidate.packages else current
    package = lock.packages.get(name)
    return wheel_size(package, lock.path.parent) if package else None


def wheel_size(package: LockedPackage, base: Path) -> int | None:
    """The `size` the lock records (indexes give it), else a local wheel's size on disk;
    the largest when the lock lists several wheels (one per platform)."""
    sizes = [s for w in package.wheels if (s := recorded_or_local(w, base))]
    return max(sizes) if sizes else None


def recorded_or_local(wheel: dict, base: Path) -> int | None:
    """A wheel's size: recorded, or of its file (a `file://` URL, or a `path` that PEP 751
    makes relative to the lock's directory)."""
    size = wheel.get("size")
    if isinstance(size, int):
        return size
    url, path = str(wheel.get("url") or ""), wheel.get("path")
    if url.startswith("file://"):
        local = Path(unquote(urlparse(url).path))
    elif isinstance(path, str):
        local = base / path
    else:
        return None
    return local.stat().st_size if local.is_file() else None
