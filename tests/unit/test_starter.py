"""The starter reads each target type's row (TargetType.starter, targets/registry.py): its
paths, the flags it needs and takes, and which of ssh's flags it refuses; `init` and the
starter text read nothing else about a type."""

from __future__ import annotations

from typing import Any

import pytest

from envlock.starters.template import (
    StarterTarget,
    default_paths,
    init_flags,
    misplaced_ssh_flags,
    missing_flags,
    target_lines,
)
from envlock.targets.registry import TARGET_TYPES


def target(kind: str, **values: Any) -> StarterTarget:
    return StarterTarget(kind, values={key.replace("_", "-"): v for key, v in values.items()})


def test_init_s_flags_are_the_rows_flags_each_once_with_the_types_that_take_it() -> None:
    options = [(flag.option, names) for flag, names in init_flags(TARGET_TYPES)]
    ssh = ("ssh", "proxmox-lxc")
    assert options == [
        ("--host", ssh),
        ("--user", ssh),
        ("--port", ssh),
        ("--identity-file", ssh),
        ("--ssh-option", ssh),
        ("--node", ("proxmox-lxc",)),
        ("--vmid", ("proxmox-lxc",)),
        ("--api-url", ("proxmox-lxc",)),
        ("--container", ("docker",)),
    ]


@pytest.mark.parametrize(
    ("kind", "paths", "missing", "keyed"),
    [
        ("local", (".envlock/t", ".envlock/t/venv"), [], ()),
        ("ssh", ("/opt/envlock", "/opt/venv"), ["--host"], ("host", "identity-file")),
        ("proxmox-lxc", ("/opt/envlock", "/opt/venv"), ["--host", "--vmid"], ("host", "vmid")),
        ("docker", ("/opt/envlock", "/opt/venv"), ["--container"], ()),
    ],
)
def test_each_type_reads_its_row(
    kind: str, paths: tuple[str, str], missing: list[str], keyed: tuple[str, ...]
) -> None:
    row = TARGET_TYPES[kind].starter
    bare = target(kind)
    assert default_paths(bare, "t") == paths
    assert default_paths(StarterTarget(kind, root="/r", venv="/v"), "t") == ("/r", "/v")
    assert [flag.option for flag in missing_flags(bare)] == missing
    assert missing_flags(target(kind, host="", vmid=200)) == missing_flags(target(kind, vmid=200))
    keyed_target = target(kind, host="h", vmid=200, identity_file="k")
    lines = target_lines(keyed_target, "t")
    keys = {line.split(" = ")[0] for line in lines if " = " in line and line[0] != "#"}
    assert set(keyed) <= keys
    assert keys - {"type", "root", "venv"} <= {flag.key for flag in row.flags}
    assert ("vmid" in keys) == any(flag.key == "vmid" for flag in row.flags)
    assert ("host" in keys) == TARGET_TYPES[kind].over_ssh
    refused = misplaced_ssh_flags(target(kind, identity_file="k"))
    assert (refused is not None) == (not TARGET_TYPES[kind].over_ssh)
    assert misplaced_ssh_flags(target(kind, ssh_options=("A=b",))) == refused
    assert misplaced_ssh_flags(bare) is None
    if refused is not None:
        assert refused == "--identity-file and --ssh-option go with --target ssh or proxmox-lxc"


def test_a_flag_not_given_writes_its_placeholder_or_nothing() -> None:
    lines = target_lines(target("proxmox-lxc"), "t")
    assert 'host = "HOST"' in lines and "vmid = 100" in lines
    assert not any(line.startswith(("user", "port", "node", "api-url")) for line in lines)
    assert '# secret-env = "PVE_PASSWORD"' in lines
    given = target_lines(target("ssh", host="h", port=2222, ssh_options=("A=b", "C=d")), "t")
    assert 'host = "h"' in given and "port = 2222" in given
    assert 'ssh-options = ["A=b", "C=d"]' in given
