"""Drift: every way a target differs from its lock, in words a user understands. Pure."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from envlock.lock import Lock
from envlock.state import State

# Kinds, roughly from most to least consequential; the order reports use.
KINDS = (
    "container",
    "container-config",
    "uv",
    "no-environment",
    "interpreter",
    "stale-lock",
    "generation-lock",
    "torch-build",
    "cuda-libraries",
    "python-version",
    "package-version",
    "package-missing",
    "package-extra",
    "pth-injection",
    "file-modified",
    "file-missing",
    "file-added",
    "script-modified",
    "script-missing",
    "venv-link",
    "cache-dir",
)


@dataclass(frozen=True)
class Drift:
    kind: str
    subject: str
    expected: str
    actual: str
    detail: str = ""
    dist: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Expectation:
    """What the target should look like, from profile and lock (no I/O needed)."""

    lock: Lock
    root: str
    venv: str
    python_version: str
    scripts: dict[str, str]
    stale: tuple[str, ...] = ()


def compute_drift(expect: Expectation, state: State) -> list[Drift]:
    drifts: list[Drift] = [Drift("stale-lock", "lock", "fresh", reason) for reason in expect.stale]
    if state.uv is not None and not state.uv.get("ok"):
        found = state.uv.get("version") or ("missing" if not state.uv.get("present") else "?")
        drifts.append(
            Drift(
                "uv",
                f"{expect.root}/bin/uv",
                "envlock's uv",
                found,
                "apply pushes envlock's uv binary to the target (no internet needed)",
            )
        )
    gen = state.current_generation
    if gen is None or not gen.complete:
        drifts.append(
            Drift(
                "no-environment",
                expect.root,
                f"generation of lock {expect.lock.short_hash}",
                "nothing applied yet" if gen is None else f"{state.current} is incomplete",
            )
        )
        return drifts + script_drift(expect, state) + link_drift(expect, state)
    if not state.in_generation:
        drifts.append(
            Drift(
                "interpreter",
                f"{expect.root}/current/bin/python",
                "runs",
                "does not start",
                "the generation's interpreter is broken",
            )
        )
        return drifts + script_drift(expect, state) + link_drift(expect, state)
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
    drifts += file_drift(state, {d.subject for d in package_drifts} | cuda_dists(package_drifts))
    drifts += script_drift(expect, state)
    drifts += link_drift(expect, state)
    if state.cache is not None and not state.cache.get("exists") and not package_drifts:
        drifts.append(
            Drift(
                "cache-dir",
                state.cache["dir"],
                "exists",
                "missing",
                "the compile-cache dir of this build does not exist yet",
            )
        )
    return sorted(drifts, key=lambda d: KINDS.index(d.kind))


def _same_python(wanted: str, actual: str) -> bool:
    """'3.11' matches any 3.11.x; '3.11.7' only itself."""
    return actual == wanted or actual.startswith(wanted + ".")


def cuda_dists(drifts: list[Drift]) -> set[str]:
    return {name for d in drifts if d.kind == "cuda-libraries" for name in d.dist.split(",")}


def package_drift(lock: Lock, state: State) -> list[Drift]:
    want = lock.versions()
    have = dict(state.packages or {})
    drifts: list[Drift] = []
    if "torch" in want and "torch" in have and want["torch"] != have["torch"]:
        drifts.append(torch_drift(want["torch"], have["torch"], state.torch or {}))
        del want["torch"], have["torch"]
    gone = {n: v for n, v in want.items() if n not in have}
    new = {n: v for n, v in have.items() if n not in want}
    cuda = cuda_library_drift(want, new, state.torch or {})
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


def torch_drift(want: str, have: str, torch: dict[str, Any]) -> Drift:
    want_label = want.partition("+")[2] or "no label"
    have_label = have.partition("+")[2] or "no label"
    if want.partition("+")[0] == have.partition("+")[0]:
        detail = (
            f"torch's build changed from {want_label} to {have_label}: same version, "
            "different CUDA build; something installed over it"
        )
    else:
        detail = f"torch changed from {want} to {have}"
    if torch.get("cuda"):
        detail += f" (the installed build reports CUDA {torch['cuda']})"
    return Drift("torch-build", "torch", want, have, detail, dist="torch")


NVIDIA_RE = re.compile(r"^(nvidia-[a-z0-9-]+?)-cu(\d+)$")


def cuda_majors(names: Iterable[str]) -> set[str]:
    """CUDA majors named by nvidia-*-cuNN package names."""
    return {m.group(2) for name in names for m in [NVIDIA_RE.match(name)] if m}


def cuda_library_drift(
    want: dict[str, str], new: dict[str, str], torch: dict[str, Any]
) -> Drift | None:
    """torch now needing nvidia-*-cu13 where the lock has -cu12: a CUDA-major change.

    Seen through the installed torch's own requirements (an install over it rarely removes
    the old libraries) and through newly installed nvidia-* packages.
    """
    locked = cuda_majors(want)
    required = {m.removeprefix("cu") for m in torch.get("cuda_requires", [])}
    now = required or cuda_majors(new)
    if not locked or not now or now <= locked:
        return None
    names = sorted(n for n in new if cuda_majors([n]) - locked)
    before = "/".join(f"cu{m}" for m in sorted(locked))
    after = "/".join(f"cu{m}" for m in sorted(now))
    return Drift(
        "cuda-libraries",
        "nvidia-* libraries",
        f"nvidia-*-{before}",
        f"nvidia-*-{after}",
        f"the CUDA major version changed: the installed packages need nvidia-*-{after} "
        f"libraries where the lock has nvidia-*-{before}"
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
    files = state.files or {}
    drifts: list[Drift] = []
    for item in files.get("modified", []):
        if item.get("dist") in folded:
            continue
        links = item.get("links", 1)
        detail = item.get("why", "")
        if links > 1:
            detail += (
                f"; the file is hardlinked ({links} links), so uv's cache copy is "
                "corrupted too: repair drops it from the cache"
            )
        drifts.append(
            Drift(
                "file-modified",
                item["path"],
                "as installed",
                "modified",
                detail,
                dist=item.get("dist", ""),
            )
        )
    for item in files.get("missing", []):
        if item.get("dist") not in folded:
            drifts.append(
                Drift("file-missing", item["path"], "present", "deleted", dist=item.get("dist", ""))
            )
    for item in files.get("added", []):
        if item.get("dist") in folded:
            continue
        if item.get("pth"):
            drifts.append(
                Drift(
                    "pth-injection",
                    item["path"],
                    "absent",
                    "added",
                    ".pth files run code at every interpreter start",
                    dist=item.get("dist", ""),
                )
            )
        else:
            drifts.append(
                Drift("file-added", item["path"], "absent", "added", dist=item.get("dist", ""))
            )
    return drifts


def script_drift(expect: Expectation, state: State) -> list[Drift]:
    found = (state.scripts or {}).get("hashes", {})
    dest = (state.scripts or {}).get("dest", "")
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
    link = state.venv_link or {}
    want = os.path.join(expect.root, "current")
    if link.get("kind") == "symlink" and link.get("target") == want:
        return []
    actual = {
        "symlink": f"-> {link.get('target')}",
        "directory": "a real directory",
        "file": "a file",
        "absent": "missing",
    }.get(link.get("kind", "absent"), "?")
    return [Drift("venv-link", expect.venv, f"-> {want}", actual)]
