"""A proxmox-lxc profile's own settings: how to reach the node and its API ([target]), and
the container it declares ([container]). Parsed here, validated in full like the rest."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from envlock.base.tomlread import ENV_NAME_RE, Table, control_char, describe, shown
from envlock.errors import UsageError
from envlock.targets.base import LocalPath
from envlock.targets.members import Member
from envlock.targets.ssh import SshSettings, read_ssh_settings

# A Proxmox node name, as pve-node defines it: it becomes part of every API path.
NODE_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")


# [target] host of a fleet that gives `hosts` only (no template for other nodes).
HOSTS_ONLY = "{hosts}"


@dataclass(frozen=True)
class FleetSelect:
    """A fleet profile's set of containers, read from /cluster/resources at each command:
    `vmids`, or `select` (every given condition holds: all tags, pool, node, name glob)."""

    vmids: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    pool: str | None = None
    node: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class LxcSettings:
    """A container on a Proxmox node: ssh to the node (for `pct exec`) and the API.

    A fleet profile has `fleet` instead of a vmid; each member's node comes from the
    cluster and its ssh host from `hosts` (node -> host) or the `{node}` template in host."""

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
    fleet: FleetSelect | None = None
    hosts: tuple[tuple[str, str], ...] = ()

    def node_host(self, node: str) -> str:
        """The ssh host of a fleet member's node: `hosts`, else the host template."""
        table = dict(self.hosts)
        if node in table:
            return table[node]
        if self.hosts and "{node}" not in self.ssh.host:
            raise UsageError(
                f"[target] hosts has no entry for the node {node}",
                hint=f'add `{node} = "HOST"` to [target] hosts, or set host = "{{node}}..."',
            )
        return self.ssh.host.replace("{node}", node)

    def member(self, member: Member) -> LxcSettings:
        """The settings of one fleet member: a concrete vmid, node and ssh host."""
        ssh = replace(self.ssh, host=self.node_host(member.node))
        return replace(self, vmid=member.vmid, node=member.node, ssh=ssh, fleet=None)

    @property
    def member_key(self) -> str:
        """A member's own folder name (`snapshot` into DIR/<vmid>/)."""
        return str(self.vmid)


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
    hosts = read_hosts(t)
    if hosts and not t.has("host"):
        t.data = {**t.data, "host": HOSTS_ONLY}  # every node must be in `hosts`
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
    if t.has("vmids") or t.has("select"):
        vmid = t.integer("vmid", None, minimum=100)  # refused by require_fleet_keys
    else:
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
    fleet = read_fleet(t)
    if fleet is None and (hosts or "{node}" in ssh.host):
        t.fail(
            "hosts" if hosts else "host",
            "a host per node is for a fleet profile (`vmids` or `select`)",
            hint="give one host, or name the fleet's containers with vmids or select",
        )
    if fleet is not None:
        require_fleet_keys(t, vmid, node, api_url, secret_env, secret_file)
    return LxcSettings(
        fleet=fleet,
        hosts=hosts,
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


def read_hosts(t: Table) -> tuple[tuple[str, str], ...]:
    """[target] hosts = { NODE = "HOST" }: how to reach each node of a fleet over ssh."""
    raw = t.raw("hosts", {})
    if not isinstance(raw, dict):
        t.fail("hosts", f'expected a table {{ NODE = "HOST" }}, found {describe(raw)}')
    hosts = []
    for node, host in raw.items():
        if not NODE_RE.fullmatch(node):
            t.fail(f"hosts.{node}", f"expected a Proxmox node name as the key, found {shown(node)}")
        if not isinstance(host, str) or not host.strip() or host.startswith("-"):
            t.fail(f"hosts.{node}", f"expected a host name or ssh alias, found {describe(host)}")
        if any(c.isspace() for c in host) or control_char(host):
            t.fail(f"hosts.{node}", f"expected a host name or ssh alias, found {shown(host)}")
        hosts.append((node, host))
    return tuple(hosts)


def read_fleet(t: Table) -> FleetSelect | None:
    """`vmids = [...]` or `select = { tags, pool, node, name }`, or None (one container)."""
    vmids = t.raw("vmids", None)
    select = t.table("select")
    if vmids is None and select is None:
        return None
    if vmids is not None and select is not None:
        t.fail("select", "a fleet is named by vmids or by select, not both")
    if vmids is not None:
        if not isinstance(vmids, list) or not vmids:
            t.fail("vmids", f"expected a non-empty array of VMIDs, found {describe(vmids)}")
        for index, item in enumerate(vmids):
            if isinstance(item, bool) or not isinstance(item, int) or item < 100:
                t.fail(f"vmids[{index}]", f"expected a VMID (>= 100), found {describe(item)}")
        if len(set(vmids)) != len(vmids):
            t.fail("vmids", "a VMID is listed twice")
        return FleetSelect(vmids=tuple(vmids))
    assert select is not None
    fleet = FleetSelect(
        tags=tuple(tag.lower() for tag in select.texts("tags", [])),
        pool=select.text("pool", None),
        node=select.text("node", None),
        name=select.text("name", None),
    )
    select.finish()
    if fleet == FleetSelect():
        t.fail("select", "expected at least one of tags, pool, node, name")
    return fleet


def require_fleet_keys(
    t: Table,
    vmid: int | None,
    node: str | None,
    api_url: str | None,
    secret_env: str | None,
    secret_file: str | None,
) -> None:
    """A fleet's members come from the cluster: no single vmid or node; the API is needed."""
    if vmid is not None:
        t.fail(
            "vmid",
            "a fleet profile (vmids or select) cannot name one container's vmid",
            hint="remove vmid, or add it to vmids; `--on VMID` picks one member for a command",
        )
    if node is not None:
        t.fail(
            "node",
            "a fleet member's node comes from /cluster/resources, not from the profile",
            hint="remove node; to keep to one node use select = { node = ... }",
        )
    why = "a fleet's containers are read from the Proxmox API (/cluster/resources)"
    if api_url is None:
        t.missing("api-url", why)
    if secret_env is None and secret_file is None:
        t.fail("secret-env", f"missing: {why}", hint='add `secret-env = "PVE_TOKEN_SECRET"`')


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
    if settings.fleet is not None:
        if container.has("hostname"):
            container.fail(
                "hostname",
                "a fleet profile's [container] applies to every member: a hostname is one "
                "container's",
                hint="remove hostname; each container keeps its own",
            )
    elif settings.node is None:
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
