"""The drift kinds: one declaration each, read by drift, plan, run, apply and the reports.

A kind says where it sorts (most consequential first), whether it keeps `envlock run` from
starting, how `apply` repairs it, and which command a user runs to fix it. Adding a kind is
one line here plus the rule in drift.py that finds it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class Repair(Enum):
    """How apply brings a kind of drift back to the lock."""

    PROVISION = "provision"  # the container, through the Proxmox API
    INSTALL_UV = "install-uv"  # push envlock's uv to the target
    LOCK = "lock"  # nothing apply can do: the user re-locks
    SWITCH = "switch"  # build or switch to the locked generation
    RESYNC = "resync"  # re-sync the active generation to its own lock
    SCRIPTS = "scripts"  # deploy the pinned scripts
    LINK = "link"  # point the stable venv path at current
    CACHE_DIR = "cache-dir"  # create the build's compile-cache dir
    REPORT = "report"  # apply cannot repair it: reported only
    OWNER = "owner"  # apply refuses: a person decides whose the directory is


@dataclass(frozen=True)
class Kind:
    name: str
    repair: Repair
    blocks_run: bool = True
    fix: str = "envlock apply {profile}"  # the command that repairs it, for hints


KINDS: tuple[Kind, ...] = (
    Kind("container", Repair.PROVISION),
    Kind("container-config", Repair.PROVISION),
    # A config change the running container takes only at its next start.
    Kind("container-restart", Repair.PROVISION, fix="envlock apply --restart {profile}"),
    # What root's processes load and write must be root's (envlock/base/ownership.py): a root or
    # compile-cache dir another user owns or may write is never used, run or repaired.
    Kind(
        "root-owner",
        Repair.OWNER,
        fix="move the root aside (it is not yours: do not run what it holds) and apply again, "
        "or set [target] root to a directory you own",
    ),
    Kind(
        "cache-owner",
        Repair.OWNER,
        fix="move the compile-cache dir aside (torch loads code from it) or set [cache] dir "
        "to a directory you own",
    ),
    Kind("uv", Repair.INSTALL_UV),
    Kind("no-environment", Repair.SWITCH),
    Kind("interpreter", Repair.SWITCH),
    Kind("stale-lock", Repair.LOCK, fix="envlock lock {profile}"),
    Kind("generation-lock", Repair.SWITCH),
    Kind("torch-build", Repair.RESYNC),
    Kind("cuda-libraries", Repair.RESYNC),
    Kind(
        "python-version",
        Repair.REPORT,
        fix="restore the lock's Python on the target, or re-lock: envlock lock {profile}",
    ),
    # GPU readiness (reconcile/gpu.py): the node's driver, not the environment, so
    # apply leaves it alone; a run refuses, as its first CUDA call would fail.
    Kind("gpu-driver", Repair.REPORT, fix="upgrade the host's NVIDIA driver"),
    Kind(
        "gpu-library",
        Repair.REPORT,
        fix="reinstall the host driver's user-space part in the container (--no-kernel-module)",
    ),
    Kind("gpu-device", Repair.REPORT, fix="pass the device node through to the container"),
    Kind("gpu-count", Repair.REPORT, fix="pass the GPUs through, or change [gpu] count"),
    Kind("package-version", Repair.RESYNC),
    Kind("package-missing", Repair.RESYNC),
    Kind("package-extra", Repair.RESYNC),
    Kind("pth-injection", Repair.RESYNC),
    Kind("file-modified", Repair.RESYNC),
    Kind("file-missing", Repair.RESYNC),
    Kind("file-added", Repair.RESYNC),
    Kind("script-modified", Repair.SCRIPTS),
    Kind("script-missing", Repair.SCRIPTS),
    Kind("venv-link", Repair.LINK),
    # A missing compile-cache dir only means the first compiled step starts cold.
    Kind("cache-dir", Repair.CACHE_DIR, blocks_run=False),
)
KIND = {kind.name: kind for kind in KINDS}
ORDER = {kind.name: index for index, kind in enumerate(KINDS)}


@dataclass(frozen=True)
class Drift:
    """One way a target differs from what the profile and lock declare."""

    kind: str
    subject: str
    expected: str
    actual: str
    detail: str = ""
    dist: str = ""  # the distribution concerned, when there is one
    links: int = 1  # for a modified file: > 1 means uv's cache shares its inode

    def __post_init__(self) -> None:
        if self.kind not in KIND:
            raise ValueError(f"undeclared drift kind {self.kind!r}")

    @property
    def declared(self) -> Kind:
        return KIND[self.kind]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["links"]
        return data


def in_order(drifts: list[Drift]) -> list[Drift]:
    """Most consequential first; a stable sort keeps each kind's own order."""
    return sorted(drifts, key=lambda d: ORDER[d.kind])


def of_repair(drifts: list[Drift], *repairs: Repair) -> list[Drift]:
    return [d for d in drifts if d.declared.repair in repairs]


def blocking(drifts: list[Drift]) -> list[Drift]:
    """The drift that keeps `envlock run` from starting."""
    return [d for d in drifts if d.declared.blocks_run]
