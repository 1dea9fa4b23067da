"""A proxmox-lxc profile's own settings: how to reach the node and its API ([target]), and
the container it declares ([container]). Parsed here, validated in full like the rest."""

from __future__ import annotations

import re
from dataclasses import dataclass

from envlock.targets.base import LocalPath
from envlock.targets.ssh import SshSettings, read_ssh_settings
from envlock.tomlread import ENV_NAME_RE, Table, control_char, describe, shown

# A Proxmox node name, as pve-node defines it: it becomes part of every API path.
NODE_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class LxcSettings:
    """A container on a Proxmox node: ssh to the node (for `pct exec`) and the API."""

    ssh: SshSettings
    api_url: str | None = None
    node: str | None = None
    vmid: int | None = None
    api_user: str | None = None
    token_id: str | None = None
    secret_env: str | None = None
    secret_file: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True


@dataclass(frozen=True)
class Mount:
    source: str
    path: str
    ro: bool = False


@dataclass(frozen=True)
class Container:
    """A Proxmox LXC container as the profile declares it."""

    ostemplate: str
    rootfs: str
    cores: int = 1
    memory: int = 1024
    swap: int = 0
    hostname: str | None = None
    unprivileged: bool = False
    features: tuple[str, ...] = ()
    net: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    snapshot_before_apply: bool = False
    keep_snapshots: int = 5


def read_lxc_settings(t: Table, local_path: LocalPath) -> LxcSettings:
    """ssh, pct and vmid reach the container; the API keys are checked when given and
    required only with a [container] (`require_api_settings`)."""
    ssh = read_ssh_settings(t, local_path)
    api_url = t.text("api-url", None)
    if api_url is not None and not re.match(r"^https://[^/\s]+", api_url):
        t.fail(
            "api-url",
            f"expected an https:// URL of the Proxmox API, found {shown(api_url)}",
            hint='e.g. "https://pve1.example:8006"',
        )
    node = t.text("node", None)
    if node is not None and not NODE_RE.fullmatch(node):
        t.fail(
            "node",
            f'expected a Proxmox node name (letters, digits and "-"), found {shown(node)}',
            hint="use the name `pvecm nodes` or the web UI shows for the node",
        )
    vmid = t.integer("vmid", minimum=100)
    api_user = t.text("api-user", "root@pam")
    if "@" not in api_user:
        t.fail("api-user", f"expected user@realm, found {shown(api_user)}", hint='e.g. "root@pam"')
    token_id = t.text("token-id", None)
    secret_env = t.string("secret-env", None)
    secret_file = t.text("secret-file", None)
    if secret_env is None and secret_file is None:
        read_secret_typo(t)
    if secret_env is not None and not ENV_NAME_RE.match(secret_env):
        t.fail("secret-env", f"expected an environment variable name, found {shown(secret_env)}")
    ca_file = t.text("ca-file", None)
    return LxcSettings(
        ssh=ssh,
        api_url=api_url,
        node=node,
        vmid=vmid,
        api_user=api_user,
        token_id=token_id,
        secret_env=secret_env,
        secret_file=local_path(secret_file) if secret_file else None,
        ca_file=local_path(ca_file) if ca_file else None,
        verify_tls=t.boolean("verify-tls", True),
    )


def read_secret_typo(t: Table) -> None:
    """Neither secret-env nor secret-file: name a misspelling of either (both are optional
    without a [container], so the unknown-key check alone would come too late to say so)."""
    for key in ("secret-env", "secret-file"):
        if t.misspelling_of(key) is not None:
            t.missing(key)


def require_api_settings(settings: LxcSettings, container: Table) -> None:
    """A [container] is created, configured and snapshotted through the Proxmox API: then
    [target] must say where the API is, which node, and where its secret comes from.
    (A misspelt key was named by [target]'s unknown-key check before this runs.)"""
    target = Table(container.path, "target", {})
    why = "a [container] is managed through the Proxmox API"
    if settings.api_url is None:
        target.missing("api-url", why)
    if settings.node is None:
        target.missing("node", why)
    if settings.secret_env is None and settings.secret_file is None:
        target.fail(
            "secret-env",
            f"missing: {why}, whose secret must come from an environment "
            "variable or a file, never from the profile",
            hint='add `secret-env = "PVE_TOKEN_SECRET"` or `secret-file = "..."`',
        )


def read_container(t: Table) -> Container:
    ostemplate = t.text("ostemplate")
    rootfs = t.text("rootfs")
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*:\S+", rootfs):
        t.fail("rootfs", f'expected STORAGE:SIZE_GB such as "local-lvm:64", found {shown(rootfs)}')
    devices = t.texts("devices", [])
    for index, dev in enumerate(devices):
        if not dev.startswith("/dev/"):
            t.fail(f"devices[{index}]", f"expected a device path under /dev, found {shown(dev)}")
        check_pve_path(
            t, f"devices[{index}]", dev, "a device path under /dev", 'e.g. "/dev/nvidia0"'
        )
    if len(set(devices)) != len(devices):
        t.fail("devices", "a device is listed twice")
    container = Container(
        ostemplate=ostemplate,
        rootfs=rootfs,
        cores=t.integer("cores", 1, minimum=1),
        memory=t.integer("memory", 1024, minimum=16),
        swap=t.integer("swap", 0, minimum=0),
        hostname=t.text("hostname", None),
        unprivileged=t.boolean("unprivileged", False),
        features=tuple(t.texts("features", [])),
        net=tuple(t.texts("net", [])),
        devices=tuple(devices),
        mounts=read_mounts(t),
        snapshot_before_apply=t.boolean("snapshot-before-apply", False),
        keep_snapshots=t.integer("keep-snapshots", 5, minimum=1),
    )
    t.finish()
    return container


def read_mounts(t: Table) -> tuple[Mount, ...]:
    raw = t.raw("mounts", [])
    if not isinstance(raw, list):
        t.fail("mounts", f"expected an array of tables {{source, path, ro}}, found {describe(raw)}")
    mounts = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            t.fail(
                f"mounts[{index}]",
                f"expected a table {{source, path, ro}}, found {describe(item)}",
            )
        m = Table(t.path, f"container.mounts[{index}]", item)
        mount = Mount(source=m.string("source"), path=m.string("path"), ro=m.boolean("ro", False))
        for key in ("source", "path"):
            value = getattr(mount, key)
            if not value.startswith("/"):
                m.fail(key, f"expected an absolute path, found {shown(value)}")
            check_pve_path(m, key, value, "an absolute path", "read-only is `ro = true`")
        m.finish()
        mounts.append(mount)
    return tuple(mounts)


def check_pve_path(t: Table, key: str, path: str, expected: str, example: str) -> None:
    """Proxmox writes a device or mount point as one "path,option=value,..." string: a ","
    or "=" in the path would add options of the profile's choosing (mp=/etc, mode=0666)."""
    problem = pve_path_problem(path)
    if problem is not None:
        t.fail(
            key,
            f'expected {expected} without commas, "=", whitespace, control characters '
            f'or ".." segments, found {shown(path)}: it {problem}',
            hint=f"give the path alone; {example}",
        )


def pve_path_problem(path: str) -> str | None:
    """What makes a path unsafe in a Proxmox property string, or None."""
    char = control_char(path)
    if char is not None:
        return f'contains the control character "{char}"'
    if "," in path or "=" in path:
        return "would add Proxmox options of its own"
    if any(c.isspace() for c in path):
        return "contains whitespace"
    if ".." in path.split("/"):
        return 'leaves its directory through ".."'
    return None
