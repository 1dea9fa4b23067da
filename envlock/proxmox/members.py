"""A fleet's members: the LXC containers of a Proxmox cluster that a profile selects.

The cluster already knows its containers and where each runs: `/cluster/resources` is read
at each command, so a container migrated to another node or newly tagged is followed
without editing the profile. Selection is pure (`select_members`) over what the API listed.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable
from typing import Any

from envlock.errors import OperationError
from envlock.proxmox.settings import FleetSelect, LxcSettings
from envlock.targets.members import Member, restrict

__all__ = ["Member", "list_members", "parse_resources", "restrict", "select_members"]


def parse_resources(items: Iterable[dict[str, Any]]) -> list[Member]:
    """The LXC containers (not templates) of `/cluster/resources?type=vm`, by vmid."""
    members = []
    for item in items:
        if item.get("type") != "lxc" or item.get("template"):
            continue
        tags = tuple(t.lower() for t in re.split(r"[;, ]+", str(item.get("tags") or "")) if t)
        members.append(
            Member(
                vmid=int(item["vmid"]),
                node=str(item["node"]),
                name=str(item.get("name") or ""),
                status=str(item.get("status") or "unknown"),
                tags=tags,
                pool=item.get("pool"),
            )
        )
    return sorted(members, key=lambda m: m.order)


def select_members(fleet: FleetSelect, members: list[Member], login: str = "") -> list[Member]:
    """The members a profile names; a listed vmid the cluster lacks is an error. The listing
    holds only what `login` may see (VM.Audit): a missing one may be a missing grant."""
    if fleet.vmids:
        known = {m.vmid: m for m in members}
        missing = [v for v in fleet.vmids if v not in known]
        if missing:
            raise OperationError(
                f"the cluster has no container {', '.join(map(str, missing))} "
                "(read from /cluster/resources)",
                hint="check [target] vmids against `pvesh get /cluster/resources --type vm`"
                + (f"; {audit_hint(login, missing[0])}" if login else ""),
            )
        return [known[v] for v in sorted(fleet.vmids)]
    return [m for m in members if matches(fleet, m)]


def audit_hint(login: str, vmid: int | str) -> str:
    """Proxmox leaves out of /cluster/resources what a login lacks VM.Audit on (no 403):
    the privilege, and the grant that fixes it."""
    who = f"--tokens '{login}'" if "!" in login else f"--users '{login}'"
    return (
        f"the API lists only containers {login} holds VM.Audit on /vms/{vmid} for: grant it "
        f"on a node with `pveum acl modify /vms/{vmid} {who} --roles PVEAuditor`"
    )


def matches(fleet: FleetSelect, m: Member) -> bool:
    return (
        set(fleet.tags) <= set(m.tags)
        and (fleet.pool is None or m.pool == fleet.pool)
        and (fleet.node is None or m.node == fleet.node)
        and (fleet.name is None or fnmatch.fnmatchcase(m.name, fleet.name))
    )


def list_members(settings: LxcSettings) -> list[Member]:
    """The fleet's members, read from the cluster now (one API login)."""
    from envlock.proxmox.api import api_call, connect  # proxmoxer loads only for Proxmox profiles

    assert settings.fleet is not None
    # connect() checks a member's settings; listing the cluster needs no vmid or node.
    session = connect(dataclasses.replace(settings, vmid=100, node="cluster"))
    with api_call(session, f"reading /cluster/resources from {session.url}"):
        items = session.api.cluster.resources.get(type="vm")
    return select_members(settings.fleet, parse_resources(items or []), session.login_id)
