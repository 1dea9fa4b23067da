"""The target types a profile may name in [target] type, and `envlock init --target` offers.
A new type is a module that defines a TargetType (its settings, transport, failures and
starter row), plus one line here; tests/unit/test_target_table.py walks every row."""

from __future__ import annotations

from envlock.errors import UsageError
from envlock.targets.base import TargetType
from envlock.targets.docker import DOCKER
from envlock.targets.local import LOCAL
from envlock.targets.lxc import PROXMOX_LXC
from envlock.targets.ssh import SSH

TARGET_TYPES: dict[str, TargetType] = {
    kind.name: kind for kind in (LOCAL, SSH, PROXMOX_LXC, DOCKER)
}


def container_types() -> str:
    """The types whose profiles may declare their container, in words, for the refusals of
    what only such a profile can do (`--restart`, `--container`): "proxmox-lxc with a
    [container] table or docker with a [docker] table"."""
    return " or ".join(
        f"{kind.name} with a [{kind.container_table}] table"
        for kind in TARGET_TYPES.values()
        if kind.provisioner is not None
    )


def needs_a_container(flag: str) -> UsageError:
    """The refusal of `flag` (--restart, --container) for a profile that declares no
    container, naming every type that may."""
    return UsageError(
        f"{flag} needs a target that declares its container: {container_types()}",
        hint="declare the container's table in the profile, or drop " + flag,
    )
