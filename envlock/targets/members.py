"""A fleet's members, whatever their type: the containers a fleet profile selects, as the
type lists them (a Proxmox cluster's /cluster/resources, each Docker engine's containers by
label), and `--on`, which keeps a command to some of them.

A member is where it runs (`node`: a Proxmox node, or the name of a Docker engine of the
profile) and which container it is there: its vmid (Proxmox), or its name (Docker, where a
name is unique on its engine only)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from envlock.errors import UsageError
from envlock.targets.base import Result

# What --on takes, in words.
ON_TAKES = (
    "--on takes a vmid, a node or a tag (a Docker fleet: a container's name, an engine's "
    "name, or a label key=value)"
)


@dataclass(frozen=True)
class Member:
    """One container of a fleet, as its type listed it."""

    vmid: int | None  # Proxmox's; None for a Docker container (its name says which)
    node: str
    name: str
    status: str  # running, stopped, exited, unknown (node offline), …
    tags: tuple[str, ...] = ()  # Proxmox tags; a Docker container's labels as "key=value"
    pool: str | None = None
    # Why the type could not list this node's containers (an engine that does not answer):
    # the member stands for them all, and fails with this message.
    error: str = ""

    @property
    def key(self) -> str:
        """What names the container on its node: the vmid, else its name."""
        return str(self.vmid) if self.vmid is not None else self.name

    @property
    def label(self) -> str:
        return f"{self.node}/{self.key}"

    @property
    def order(self) -> tuple[int, str, str]:
        return (self.vmid or 0, self.node, self.name)

    @property
    def running(self) -> bool:
        return self.status == "running"


def restrict(members: list[Member], selectors: tuple[str, ...]) -> list[Member]:
    """`--on SELECTOR` (repeatable, or comma-separated): a vmid, a node or a tag; for a
    Docker fleet, a container's name, an engine's or a label (key=value)."""
    if not selectors:
        return members
    words = [w.strip() for s in selectors for w in s.split(",") if w.strip()]
    chosen = [m for m in members if any(on_matches(w, m) for w in words)]
    if not chosen:
        shown = ", ".join(m.label for m in members) or "none"
        raise UsageError(
            f"--on {','.join(words)} matches no member of the fleet (members: {shown})",
            hint=ON_TAKES,
        )
    return chosen


def on_matches(word: str, m: Member) -> bool:
    if m.vmid is not None and word.isdigit():
        return m.vmid == int(word)
    if m.vmid is None and word in (m.name, m.label):
        return True
    return word == m.node or word.lower() in m.tags or word in m.tags


class FleetTransport:
    """A fleet profile's own transport: commands reach its members (converge/fleet.py),
    never the fleet as a whole; a code path that forgets to pick a member fails clearly."""

    name = "a fleet of containers"
    system_python = "python3"

    def run(self, argv: list[str], **_: Any) -> Result:
        raise UsageError(
            "this profile names a fleet of containers: pick one with --on VMID (a Docker "
            "fleet: --on NAME)",
            hint=ON_TAKES,
        )

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        self.run(argv)
        raise AssertionError("unreachable")
