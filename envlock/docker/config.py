"""A [docker] table against a container as the engine describes it (`docker inspect`'s
document, the SDK's `container.attrs`): pure, no SDK. A container's config cannot change in
place, so every difference is a recreate from the same image, its volumes kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envlock.docker.settings import DockerSpec, Volume

GPU = [["gpu"]]


@dataclass(frozen=True)
class Difference:
    key: str  # the [docker] key
    expected: str
    actual: str


def differences(spec: DockerSpec, attrs: dict[str, Any]) -> list[Difference]:
    """What differs between the declared container and the engine's, key by key; a key the
    table leaves out is the engine's business (never a difference)."""
    config = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    pairs = [
        ("image", spec.image, config.get("Image")),
        ("gpus", gpus_shown(spec.gpus), gpus_shown(gpus_of(host.get("DeviceRequests")))),
        ("volumes", volumes_shown(spec.volumes), volumes_shown(volumes_of(attrs.get("Mounts")))),
    ]
    if spec.shm_size is not None:
        pairs.append(("shm-size", str(spec.shm_size), str(host.get("ShmSize"))))
    if spec.ipc is not None:
        pairs.append(("ipc", spec.ipc, str(host.get("IpcMode"))))
    if spec.network is not None:
        pairs.append(("network", spec.network, str(host.get("NetworkMode"))))
    if spec.command is not None:
        pairs.append(("command", " ".join(spec.command), " ".join(config.get("Cmd") or ())))
    env = dict(item.split("=", 1) for item in config.get("Env") or () if "=" in item)
    for name, value in spec.env:
        pairs.append((f"env.{name}", value, env.get(name, "unset")))
    labels = config.get("Labels") or {}
    for name, value in spec.labels:
        pairs.append((f"labels.{name}", value, labels.get(name, "unset")))
    return [Difference(key, want, str(have)) for key, want, have in pairs if want != have]


def device_requests(gpus: str | tuple[str, ...] | None) -> list[dict[str, Any]]:
    """The engine's DeviceRequests for [docker] gpus (`docker run --gpus`'s)."""
    if gpus is None:
        return []
    if gpus == "all":
        return [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": GPU, "Options": {}}]
    return [{"Driver": "", "Count": 0, "DeviceIDs": list(gpus), "Capabilities": GPU, "Options": {}}]


def gpus_of(requests: list[dict[str, Any]] | None) -> str | tuple[str, ...] | None:
    """[docker] gpus as the engine's DeviceRequests say it."""
    for request in requests or ():
        if ["gpu"] not in (request.get("Capabilities") or []):
            continue
        if request.get("DeviceIDs"):
            return tuple(request["DeviceIDs"])
        if request.get("Count") == -1:
            return "all"
    return None


def gpus_shown(gpus: str | tuple[str, ...] | None) -> str:
    if gpus is None:
        return "none"
    return gpus if isinstance(gpus, str) else ",".join(gpus)


def volumes_of(mounts: list[dict[str, Any]] | None) -> tuple[Volume, ...]:
    """The container's volumes and bind mounts, as [docker] volumes would declare them."""
    found = []
    for mount in mounts or ():
        kind = mount.get("Type")
        if kind not in ("volume", "bind"):
            continue
        source = mount.get("Name") if kind == "volume" else mount.get("Source")
        found.append(Volume(str(source), str(mount.get("Destination")), not mount.get("RW", True)))
    return tuple(found)


def volumes_shown(volumes: tuple[Volume, ...]) -> str:
    return ", ".join(sorted(v.shown() for v in volumes)) or "none"
