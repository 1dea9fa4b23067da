"""The target types a profile may name in [target] type, and `envlock init --target` offers.
A new type is a module that defines a TargetType (its settings, transport, failures and
starter row), plus one line here; tests/unit/test_target_table.py walks every row."""

from __future__ import annotations

from envlock.targets.base import TargetType
from envlock.targets.docker import DOCKER
from envlock.targets.local import LOCAL
from envlock.targets.lxc import PROXMOX_LXC
from envlock.targets.ssh import SSH

TARGET_TYPES: dict[str, TargetType] = {
    kind.name: kind for kind in (LOCAL, SSH, PROXMOX_LXC, DOCKER)
}
