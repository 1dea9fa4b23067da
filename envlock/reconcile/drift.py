"""Drift: every way a target differs from its lock, in words a user understands. Pure.

The kinds themselves (order, whether they block a run, how they are repaired) are declared
in kinds.py; this module holds the rules that find them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from envlock.base.cuda import cuda_major, cuda_majors, is_torch_cuda_library
from envlock.base.drift_kinds import Drift, in_order
from envlock.lock.read import Lock
from envlock.reconcile.gpu import gpu_drift
from envlock.reconcile.state import FileChange, State, TorchBuild, Trust


@dataclass(frozen=True)
class Expectation:
    """What the target should look like, from profile and lock (no I/O needed)."""

    lock: Lock
    root: str
    venv: str
    python_version: str
    scripts: dict[str, str]
    stale: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # device nodes the container should have
    gpu_count: int | None = None  # GPUs the environment should see; None: undeclared
    # The lock is not the profile's (a snapshot's): the generation apply ends on is held,
    # as a rollback holds one, so that `run` judges it by its own lock.
    held: bool = False
    # The active generation was adopted (`apply --adopt`) and is held (a rollback to it): no
    # lock built it, so its files against its manifest are all it is judged by.
    adopted: bool = False


def compute_drift(expect: Expectation, state: State) -> list[Drift]:
    """Every drift of `state` against `expect`, most consequential first."""
    drifts = [Drift("stale-lock", "lock", "fresh", reason) for reason in expect.stale]
    drifts += trust_drift(state.trust, expect.root)
    drifts += uv_drift(expect, state)
    drifts += generation_drift(expect, state)
    drifts += script_drift(expect, state)
    drifts += link_drift(expect, state)
    drifts += gpu_drift(state.gpu, state.torch, expect.devices, expect.gpu_count)
    return in_order(drifts)


def trust_drift(trust: Trust, root: str) -> list[Drift]:
    """A root or compile-cache dir that is not this user's: never run, written or exported."""
    drifts = []
    if trust.root:
        drifts.append(
            Drift(
                "root-owner",
                root,
                "yours or root's, writable by no one else",
                trust.root,
                "envlock neither runs the interpreter of a root another user may write nor "
                "writes into it",
            )
        )
    if trust.cache_dir:
        drifts.append(
            Drift(
                "cache-owner",
                "compile-cache dir",
                "yours or root's, writable by no one else",
                trust.cache_dir,
                "never exported to a run: torch loads pickles and .so files from it",
            )
        )
    return drifts


def uv_drift(expect: Expectation, state: State) -> list[Drift]:
    if state.uv is None or state.uv.ok:
        return []
    found = state.uv.version or ("missing" if not state.uv.present else "?")
    return [
        Drift(
            "uv",
            f"{expect.root}/bin/uv",
            "envlock's uv",
            found,
            "apply pushes envlock's uv binary to the target (no internet needed)",
        )
    ]


def generation_drift(expect: Expectation, state: State) -> list[Drift]:
    """The active generation against the lock: which one, its Python, packages and files."""
    gen = state.current_generation
    if gen is None or not gen.complete:
        actual = "nothing applied yet" if gen is None else f"{state.current} is incomplete"
        return [
            Drift(
                "no-environment",
                expect.root,
                f"generation of lock {expect.lock.short_hash}",
                actual,
            )
        ]
    if not state.in_generation:
        if state.refused_python is not None:
            actual = f"is {state.refused_python}, a file inside the root: not run"
            why = "a venv's python links to a base interpreter; this one was planted"
        else:
            actual, why = "does not start", "the generation's interpreter is broken"
        return [Drift("interpreter", f"{expect.root}/current/bin/python", "runs", actual, why)]
    if expect.adopted and gen.adopted_from:
        return file_drift(state, set())
    drifts = []
    if gen.lock_hash != expect.lock.short_hash:
        drifts.append(
            Drift(
                "generation-lock",
                gen.name,
                f"lock {expect.lock.short_hash}",
                f"lock {gen.lock_hash}",
                "the active generation was built from "
                "another lock; apply builds or switches to the locked one",
            )
        )
    if not _same_python(expect.python_version, state.python_version):
        drifts.append(
            Drift("python-version", "python", expect.python_version, state.python_version)
        )
    package_drifts = package_drift(expect.lock, state)
    drifts += package_drifts
    folded = {name for d in package_drifts for name in d.dist.split(",") if name}
    drifts += file_drift(state, folded)
    if state.cache is not None and not state.cache.exists and not package_drifts:
        drifts.append(
            Drift(
                "cache-dir",
                state.cache.dir,
                "exists",
                "missing",
                "the compile-cache dir of this build does not exist yet",
            )
        )
    return drifts


def _same_python(wanted: str, actual: str) -> bool:
    """'3.11' matches any 3.11.x; '3.11.7' only itself."""
    return actual == wanted or actual.startswith(wanted + ".")


def package_drift(lock: Lock, state: State) -> list[Drift]:
    want = lock.versions()
    have = dict(state.packages or {})
    drifts: list[Drift] = []
    if "torch" in want and "torch" in have and want["torch"] != have["torch"]:
        drifts.append(torch_drift(want["torch"], have["torch"], state.torch))
        del want["torch"], have["torch"]
    gone = {n: v for n, v in want.items() if n not in have}
    new = {n: v for n, v in have.items() if n not in want}
    cuda = cuda_library_drift(want, new, state.torch)
    if cuda is not None:
        drifts.append(cuda)
        for name in cuda.dist.split(","):
            gone.pop(name, None)
            new.pop(name, None)
    for name in sorted(want):
        if name in have and want[name] != have[name]:
            drifts.append(
                Drift(
                    "package-version",
                    name,
                    want[name],
                    have[name],
                    _direction(want[name], have[name]),
                    dist=name,
                )
            )
    drifts += [
        Drift("package-missing", n, v, "not installed", dist=n) for n, v in sorted(gone.items())
    ]
    drifts += [
        Drift("package-extra", n, "not in the lock", v, dist=n) for n, v in sorted(new.items())
    ]
    return drifts


def torch_drift(want: str, have: str, torch: TorchBuild | None) -> Drift:
    """torch replaced: another version, or the same version in another build."""
    shown = shown_torch(have, torch)
    want_label = want.partition("+")[2] or "the unlabelled (PyPI) build"
    have_label = (torch.local if torch else None) or have.partition("+")[2] or "no label"
    if want.partition("+")[0] != have.partition("+")[0]:
        detail = f"torch changed from {want} to {shown}"
    elif want_label != have_label:
        detail = (
            f"torch's build changed from {want_label} to {have_label}: same version, "
            "different CUDA build; something installed over it"
        )
    else:
        detail = f"the same {have_label} build from another index replaced the locked wheel"
    if torch is not None and torch.cuda and not torch.pypi_build:
        detail += f" (the installed build reports CUDA {torch.cuda})"
    return Drift("torch-build", "torch", want, shown, detail, dist="torch")


def shown_torch(have: str, torch: TorchBuild | None) -> str:
    """`2.14.1 (PyPI build, CUDA 13.0)` for a build whose label only version.py has."""
    if torch is None or not torch.pypi_build or torch.version != have:
        return have
    what = f"CUDA {torch.cuda}" if torch.cuda else f"+{torch.local}"
    return f"{have} (PyPI build, {what})"


def cuda_library_drift(
    want: dict[str, str], new: dict[str, str], torch: TorchBuild | None
) -> Drift | None:
    """torch now needing CUDA 13 libraries where the lock has CUDA 12 ones: a major change.

    The locked major comes from torch's own CUDA library families in the lock, never from
    other packages' -cuNN names (nvidia-cutlass-dsl-libs-cu12 and -cu13 sit side by side
    in locks with flashinfer or sglang). The installed one comes from the installed torch's
    own requirements (an install over it rarely removes the old libraries), else from newly
    installed libraries of those families.
    """
    locked = cuda_majors(want)
    required = {m.removeprefix("cu") for m in (torch.cuda_requires if torch else ())}
    now = required or cuda_majors(new)
    if not locked or not now or now <= locked:
        return None
    # New libraries of torch's families not of a locked major (unsuffixed nvidia-cufft's
    # version names no major: it came with the new toolkit).
    names = sorted(
        n for n, v in new.items() if is_torch_cuda_library(n) and cuda_major(n, v) not in locked
    )
    before = "/".join(f"cu{m}" for m in sorted(locked))
    after = "/".join(f"cu{m}" for m in sorted(now))
    return Drift(
        "cuda-libraries",
        "nvidia-* libraries",
        f"nvidia-*-{before}",
        f"nvidia-*-{after}",
        f"the CUDA major version changed: the installed packages need CUDA "
        f"{'/'.join(sorted(now))} libraries where the lock has CUDA {'/'.join(sorted(locked))}"
        + (f" ({len(names)} new: {', '.join(names)})" if names else ""),
        dist=",".join(names),
    )


def _direction(want: str, have: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return "downgraded" if Version(have) < Version(want) else "upgraded"
    except InvalidVersion:
        return "changed"


def file_drift(state: State, folded: set[str]) -> list[Drift]:
    """File changes inside the generation; those of packages already reported are folded."""
    files = state.files
    if files is None:
        return []
    drifts = [_modified(item) for item in files.modified if item.dist not in folded]
    drifts += [
        Drift("file-missing", item.path, "present", "deleted", dist=item.dist)
        for item in files.missing
        if item.dist not in folded
    ]
    drifts += [_added(item) for item in files.added if item.dist not in folded]
    return drifts


def _modified(item: FileChange) -> Drift:
    detail = item.why
    if item.links > 1:
        detail += (
            f"; the file is hardlinked ({item.links} links), so uv's cache copy is "
            "corrupted too: repair drops it from the cache"
        )
    return Drift(
        "file-modified",
        item.path,
        "as installed",
        "modified",
        detail,
        dist=item.dist,
        links=item.links,
    )


def _added(item: FileChange) -> Drift:
    if item.pth:
        return Drift(
            "pth-injection",
            item.path,
            "absent",
            "added",
            ".pth files run code at every interpreter start",
            dist=item.dist,
        )
    return Drift("file-added", item.path, "absent", "added", dist=item.dist)


def script_drift(expect: Expectation, state: State) -> list[Drift]:
    found = state.scripts.hashes if state.scripts else {}
    dest = state.scripts.dest if state.scripts else ""
    drifts = []
    for rel, sha in sorted(expect.scripts.items()):
        actual = found.get(rel)
        path = os.path.join(dest, rel)
        if actual is None:
            drifts.append(Drift("script-missing", path, sha[:12], "missing"))
        elif actual != sha:
            drifts.append(
                Drift(
                    "script-modified",
                    path,
                    sha[:12],
                    actual[:12],
                    "the deployed script differs from its pinned hash",
                )
            )
    return drifts


def link_drift(expect: Expectation, state: State) -> list[Drift]:
    link = state.venv_link
    want = os.path.join(expect.root, "current")
    if link is not None and link.kind == "symlink" and link.target == want:
        return []
    kind = link.kind if link is not None else "absent"
    actual = {
        "symlink": f"-> {link.target if link else None}",
        "directory": "a real directory",
        "file": "a file",
        "absent": "missing",
    }.get(kind, "?")
    return [Drift("venv-link", expect.venv, f"-> {want}", actual)]
