"""The starter's table of target types (starter.STARTER_TYPES): each type's facts in one row,
read by `init` and by the starter text alike, and naming exactly the registered types."""

from __future__ import annotations

import pytest

from envlock.starters.template import (
    STARTER_TYPES,
    StarterTarget,
    default_paths,
    misplaced_ssh_flags,
    missing_flags,
    ssh_types,
    target_lines,
)
from envlock.targets.registry import TARGET_TYPES


def test_the_table_names_every_registered_type_and_agrees_on_which_are_remote() -> None:
    assert set(STARTER_TYPES) == set(TARGET_TYPES)
    for name, kind in STARTER_TYPES.items():
        assert kind.over_ssh == TARGET_TYPES[name].remote, name
    assert ssh_types() == "ssh or proxmox-lxc"


@pytest.mark.parametrize(
    ("kind", "paths", "missing", "keyed"),
    [
        ("local", (".envlock/t", ".envlock/t/venv"), [], ()),
        ("ssh", ("/opt/envlock", "/opt/venv"), ["host"], ("host", "identity-file")),
        ("proxmox-lxc", ("/opt/envlock", "/opt/venv"), ["host", "vmid"], ("host", "vmid")),
    ],
)
def test_each_type_reads_its_row(
    kind: str, paths: tuple[str, str], missing: list[str], keyed: tuple[str, ...]
) -> None:
    bare = StarterTarget(kind)
    assert default_paths(bare, "t") == paths
    assert default_paths(StarterTarget(kind, root="/r", venv="/v"), "t") == ("/r", "/v")
    assert missing_flags(bare) == missing
    keyed_target = StarterTarget(kind, host="h", vmid=200, identity_file="k")
    keys = {line.split(" = ")[0] for line in target_lines(keyed_target, "t") if " = " in line}
    assert set(keyed) <= keys
    assert "vmid" in keys if STARTER_TYPES[kind].container else "vmid" not in keys
    assert ("host" in keys) == STARTER_TYPES[kind].over_ssh
    with_key = StarterTarget(kind, identity_file="k")
    assert misplaced_ssh_flags(with_key) == (not STARTER_TYPES[kind].over_ssh)
    assert misplaced_ssh_flags(StarterTarget(kind, ssh_options=("A=b",))) == (kind == "local")
    assert not misplaced_ssh_flags(bare)
