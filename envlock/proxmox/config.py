"""The profile's [container] as Proxmox LXC parameters, and how a container's config differs.

Pure: no I/O. Values follow pve-container's config format: `netN` and `features` are
property strings, `devN` is `[path=]<path>[,gid=..][,mode=..][,uid=..]`, a bind mount is
`mpN: <host path>,mp=<path>[,ro=1]`, and `rootfs` is created from `STORAGE:SIZE_GB` but read
back as `STORAGE:<volume>,size=<N>G`. Comparisons parse these strings, so the order of
properties and what PVE adds on its own (a net device's hwaddr and type) are no drift.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from envlock.proxmox.settings import Container, Mount

ConfigValue = str | int

# Parameters of the create request that never show up in the config.
CREATE_ONLY = frozenset({"ostemplate"})
# Keys PVE cannot change through the config API: a different value needs a new container.
NOT_LIVE = {
    "rootfs": "envlock does not resize or move the root disk: grow it with "
    "`pct resize VMID rootfs <SIZE>G` on the node, or recreate the container",
    "unprivileged": "fixed when the container is created: recreate it (or restore a backup "
    "with the other setting)",
}
# Families the profile declares in full: entries the profile lacks are removed.
MANAGED_FAMILIES = re.compile(r"^(net|dev|mp)\d+$")
# What a running container only takes at its next start (new devN/mpN may hotplug).
# Keys only root@pam (password login) may set: device passthrough, bind mounts, features
# of privileged containers.
ROOT_ONLY = re.compile(r"^(dev\d+|mp\d+|features)$")
# Property values PVE fills in by itself for a net device.
NET_AUTOMATIC = ("hwaddr", "type")
NET_FLAGS = ("firewall", "link_down", "host-managed")
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


@dataclass(frozen=True)
class ConfigDifference:
    """One config key whose value on the container is not what the profile declares."""

    key: str
    expected: ConfigValue | None  # None: the key should not be set
    actual: ConfigValue | None  # None: not set on the container
    live: bool  # fixable through PUT /config, without recreating the container
    note: str = ""  # why it cannot be fixed through the API, when it cannot

    def describe(self) -> str:
        if self.expected is None:
            change = f"{self.key}: remove {self.actual!s}"
        elif self.actual is None:
            change = f"{self.key}: add {self.expected!s}"
        else:
            change = f"{self.key}: {self.actual!s} -> {self.expected!s}"
        return change if not self.note else f"{change} ({self.note})"


def desired_config(container: Container) -> dict[str, ConfigValue]:
    """The LXC parameters the profile declares; `ostemplate` matters only for the create."""
    config: dict[str, ConfigValue] = {
        "ostemplate": container.ostemplate,
        "rootfs": container.rootfs,
        "cores": container.cores,
        "memory": container.memory,
        "swap": container.swap,
        "unprivileged": int(container.unprivileged),
    }
    if container.hostname:
        config["hostname"] = container.hostname
    if container.features:
        config["features"] = features_value(container.features)
    config.update((f"net{i}", net) for i, net in enumerate(container.net))
    config.update((f"dev{i}", dev) for i, dev in enumerate(container.devices))
    config.update((f"mp{i}", mount_value(m)) for i, m in enumerate(container.mounts))
    return config


def create_params(container: Container, vmid: int) -> dict[str, ConfigValue]:
    """The body of POST /nodes/{node}/lxc."""
    return {"vmid": vmid, **desired_config(container)}


def features_value(features: Iterable[str]) -> str:
    """`["nesting=1", "keyctl"]` as PVE's property string `nesting=1,keyctl=1`."""
    items = [part.strip() for item in features for part in item.split(",") if part.strip()]
    return ",".join(item if "=" in item else f"{item}=1" for item in items)


def mount_value(mount: Mount) -> str:
    return f"{mount.source},mp={mount.path}" + (",ro=1" if mount.ro else "")


def root_only_keys(params: Mapping[str, object]) -> list[str]:
    """The keys of a request that Proxmox lets only root@pam (password login) set."""
    keys = []
    for key, value in params.items():
        if not ROOT_ONLY.match(key):
            continue
        if key.startswith("mp") and not _volume(value).startswith("/"):
            continue  # a storage volume: any user with the privileges may set it
        keys.append(key)
    # Removing a device or the features is as restricted as setting them.
    deletes = str(params.get("delete") or "").split(",")
    keys += [k for k in deletes if ROOT_ONLY.match(k) and not k.startswith("mp")]
    return sorted(set(keys), key=natural)


def config_differences(
    desired: Mapping[str, ConfigValue], actual: Mapping[str, object]
) -> list[ConfigDifference]:
    """What differs between the declared config and a container's (GET /config), by key."""
    out = []
    for key in sorted(desired, key=natural):
        if key in CREATE_ONLY:
            continue
        found = actual.get(key)
        if not same(key, desired[key], found):
            out.append(_difference(key, desired[key], found))
    for key in sorted(actual, key=natural):
        if key in desired or not _managed(key, actual[key]):
            continue
        out.append(_difference(key, None, actual[key]))
    return out


def config_update(
    differences: Iterable[ConfigDifference], actual: Mapping[str, object]
) -> dict[str, ConfigValue]:
    """The body of PUT /config that fixes the live differences (`delete` lists removals)."""
    body: dict[str, ConfigValue] = {}
    deletes = []
    for diff in differences:
        if not diff.live:
            continue
        if diff.expected is None:
            deletes.append(diff.key)
        elif re.match(r"^net\d+$", diff.key):
            body[diff.key] = _keep_hwaddr(str(diff.expected), actual.get(diff.key))
        else:
            body[diff.key] = diff.expected
    if deletes:
        body["delete"] = ",".join(deletes)
    return body


def same(key: str, expected: ConfigValue, actual: object) -> bool:
    """True when the container's value means what the profile declares."""
    if actual is None:
        return key == "unprivileged" and str(expected) == "0"  # PVE's default
    if key == "features":
        return _flags(split_props(expected)[1]) == _flags(split_props(actual)[1])
    if re.match(r"^net\d+$", key):
        return _net(expected, declared=str(expected)) == _net(actual, declared=str(expected))
    if re.match(r"^dev\d+$", key):
        return _device(expected) == _device(actual)
    if re.match(r"^mp\d+$", key):
        return _mount(expected) == _mount(actual)
    if key == "rootfs":
        return _same_rootfs(str(expected), str(actual))
    return str(expected).strip() == str(actual).strip()


def split_props(text: object) -> tuple[str | None, dict[str, str]]:
    """(the bare first value or None, {key: value}) of a PVE property string."""
    first, props = None, {}
    for n, part in enumerate(str(text).split(",")):
        key, eq, value = part.partition("=")
        if eq:
            props[key.strip()] = value.strip()
        elif part.strip() and n == 0:
            first = part.strip()
    return first, props


def natural(key: str) -> tuple[str, int]:
    """Sort key so that net2 comes before net10."""
    match = re.match(r"^(.*?)(\d+)$", key)
    return (match.group(1), int(match.group(2))) if match else (key, -1)


def parse_size(text: str) -> int | None:
    """Bytes in a PVE size such as 128G or 512M (a bare number is bytes), or None."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip(), re.IGNORECASE)
    if not match:
        return None
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2).upper()])


# -- comparisons ------------------------------------------------------------------------


def _bool(value: str) -> str:
    low = value.lower()
    return "1" if low in TRUE else "0" if low in FALSE else value


def _flags(props: Mapping[str, str]) -> dict[str, str]:
    return {k: _bool(v) for k, v in props.items()}


def _net(value: object, *, declared: str) -> dict[str, str]:
    first, props = split_props(value)
    given = split_props(declared)[1]
    if first is not None:
        props["name"] = first
    out = {k: _bool(v) if k in NET_FLAGS else v for k, v in props.items()}
    return {k: v for k, v in out.items() if k not in NET_AUTOMATIC or k in given}


def _device(value: object) -> dict[str, str]:
    first, props = split_props(value)
    if first is not None:
        props.setdefault("path", first)
    return {k: _bool(v) if k == "deny-write" else v for k, v in props.items()}


def _mount(value: object) -> tuple[str, str, str]:
    first, props = split_props(value)
    return (first or props.get("volume", ""), props.get("mp", ""), _bool(props.get("ro", "0")))


def _volume(value: object) -> str:
    first, props = split_props(value)
    return first or props.get("volume", "")


def _same_rootfs(expected: str, actual: str) -> bool:
    want_storage, _, want_size = expected.partition(":")
    have_volume = _volume(actual)
    if not re.fullmatch(r"\d+(\.\d+)?", want_size):
        return expected.split(",")[0] == have_volume  # an existing volume, named in full
    if have_volume.split(":")[0] != want_storage:
        return False
    size = split_props(actual)[1].get("size")
    have = parse_size(size) if size else None
    return have is None or have == int(float(want_size) * SIZE_UNITS["G"])


def _managed(key: str, value: object) -> bool:
    """True for a key the profile declares in full, so that one it lacks is drift."""
    if key == "features":
        return True
    if not MANAGED_FAMILIES.match(key):
        return False
    # A storage volume mount holds data: envlock never removes one.
    return not key.startswith("mp") or _volume(value).startswith("/")


def _difference(key: str, expected: ConfigValue | None, actual: object) -> ConfigDifference:
    found = actual if isinstance(actual, int) or actual is None else str(actual)
    if key in NOT_LIVE:
        return ConfigDifference(key, expected, found, live=False, note=NOT_LIVE[key])
    if key.startswith("mp") and actual is not None and not _volume(actual).startswith("/"):
        note = (
            f"{key} holds a storage volume, which envlock does not replace: "
            "move it to another mpN by hand or renumber the profile's mounts"
        )
        return ConfigDifference(key, expected, found, live=False, note=note)
    return ConfigDifference(key, expected, found, live=True)


def _keep_hwaddr(expected: str, actual: object) -> str:
    """A net value to write: the container keeps its MAC address unless the profile sets one."""
    if actual is None or "hwaddr" in split_props(expected)[1]:
        return expected
    hwaddr = split_props(actual)[1].get("hwaddr")
    return f"{expected},hwaddr={hwaddr}" if hwaddr else expected
