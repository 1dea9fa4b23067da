"""[docker]: the container envlock creates, checks and recreates for a docker target.

```toml
[docker]
image = "nvcr.io/nvidia/pytorch:25.01-py3"
gpus = "all"                 # or ["0", "1"]: device ids; a device request with the gpu capability
volumes = [{ source = "envroot", path = "/opt/envlock" },       # a named volume
           { source = "/data", path = "/data", ro = true }]     # a bind mount (absolute)
shm-size = "16g"
ipc = "host"
env = { NCCL_DEBUG = "WARN" }
labels = { team = "vision" }
command = ["sleep", "infinity"]
network = "none"
keep-commits = 3             # envlock-<name>:<generation>-<time> images, taken before a change
```
Pure: no Docker SDK here (the profile reader loads this for every docker profile).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envlock.base.tomlread import ENV_NAME_RE, Table, describe, shown

SIZE_RE = re.compile(r"(?P<number>\d+)(?P<unit>[bkmg]?)", re.I)
UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
IPC_MODES = ("private", "shareable", "host", "none")
VOLUME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


@dataclass(frozen=True)
class Volume:
    """A named volume (source a name) or a bind mount (source an absolute path)."""

    source: str
    path: str
    ro: bool = False

    @property
    def kind(self) -> str:
        return "bind" if self.source.startswith("/") else "volume"

    def shown(self) -> str:
        return f"{self.source}:{self.path}" + (":ro" if self.ro else "")


@dataclass(frozen=True)
class DockerSpec:
    """A profile's [docker] table."""

    name: str
    image: str
    gpus: str | tuple[str, ...] | None = None  # "all", device ids, or none asked
    volumes: tuple[Volume, ...] = ()
    shm_size: int | None = None  # bytes
    ipc: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] | None = None
    network: str | None = None
    keep_commits: int = 3
    commit_before_apply: bool = True
    # Read by the GPU rules as a [container]'s device nodes: a docker container's GPUs come
    # through the engine's device request, and [gpu] count checks them inside.
    devices: tuple[str, ...] = field(default=())

    @property
    def repository(self) -> str:
        """The image repository of envlock's commits of this container."""
        return f"envlock-{self.name.lower()}"


def read_docker_spec(t: Table, container: str) -> DockerSpec:
    name = t.text("name", container)
    if name != container:
        t.fail(
            "name",
            f"expected the container [target] names ({shown(container)}), found {shown(name)}",
            hint="leave `name` out: it is [target] container",
        )
    spec = DockerSpec(
        name=name,
        image=read_image(t),
        gpus=read_gpus(t),
        volumes=read_volumes(t),
        shm_size=read_size(t, "shm-size"),
        ipc=read_choice(t, "ipc", IPC_MODES),
        env=read_mapping(t, "env", names=True),
        labels=read_mapping(t, "labels", names=False),
        command=read_command(t),
        network=read_network(t),
        keep_commits=t.integer("keep-commits", 3, minimum=1),
        commit_before_apply=t.boolean("commit-before-apply", True),
    )
    t.finish()
    return spec


def read_image(t: Table) -> str:
    image = t.text("image")
    if not image or image.startswith("-") or any(c.isspace() for c in image):
        t.fail("image", f"expected an image reference such as ubuntu:24.04, found {shown(image)}")
    return image


def read_gpus(t: Table) -> str | tuple[str, ...] | None:
    raw = t.raw("gpus", None)
    if raw is None:
        return None
    if raw == "all":
        return "all"
    if isinstance(raw, list) and raw and all(isinstance(i, str) and i for i in raw):
        ids = tuple(t.texts("gpus"))
        if len(set(ids)) != len(ids):
            t.fail("gpus", "a device id is listed twice")
        return ids
    t.fail(
        "gpus",
        f'expected "all" or an array of device ids such as ["0", "1"], found {describe(raw)}',
        hint="ids are strings: an index or a GPU UUID (nvidia-smi -L)",
    )


def read_volumes(t: Table) -> tuple[Volume, ...]:
    raw = t.raw("volumes", [])
    if not isinstance(raw, list):
        t.fail(
            "volumes", f"expected an array of tables {{source, path, ro}}, found {describe(raw)}"
        )
    volumes = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            t.fail(
                f"volumes[{index}]",
                f"expected a table {{source, path, ro}}, found {describe(item)}",
            )
        v = Table(t.path, f"docker.volumes[{index}]", item)
        volume = Volume(v.text("source"), v.text("path"), v.boolean("ro", False))
        if not volume.path.startswith("/"):
            v.fail(
                "path", f"expected an absolute path in the container, found {shown(volume.path)}"
            )
        if volume.kind == "volume" and not VOLUME_RE.fullmatch(volume.source):
            v.fail(
                "source",
                f"expected a volume's name or an absolute host path, found {shown(volume.source)}",
            )
        v.finish()
        volumes.append(volume)
    if len({v.path for v in volumes}) != len(volumes):
        t.fail("volumes", "two volumes are mounted at the same path")
    return tuple(volumes)


def read_size(t: Table, key: str) -> int | None:
    raw = t.raw(key, None)
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    match = SIZE_RE.fullmatch(raw) if isinstance(raw, str) else None
    if match is None or int(match["number"]) == 0:
        t.fail(key, f'expected a size such as "16g", "512m" or bytes, found {describe(raw)}')
    return int(match["number"]) * UNITS[match["unit"].lower()]


def read_choice(t: Table, key: str, choices: tuple[str, ...]) -> str | None:
    value = t.text(key, None)
    if value is not None and value not in choices and not value.startswith("container:"):
        t.fail(key, f"expected one of {', '.join(choices)} or container:NAME, found {shown(value)}")
    return value


def read_mapping(t: Table, key: str, *, names: bool) -> tuple[tuple[str, str], ...]:
    table = t.table(key)
    if table is None:
        return ()
    items = []
    for name in table.data:
        if names and not ENV_NAME_RE.match(name):
            table.fail(name, f"expected a variable name, found {shown(name)}")
        items.append((name, table.text(name)))
    return tuple(sorted(items))


def read_command(t: Table) -> tuple[str, ...] | None:
    command = t.texts("command", None)
    if command is not None and not command:
        t.fail("command", "expected the command the container runs, found an empty array")
    return tuple(command) if command is not None else None


def read_network(t: Table) -> str | None:
    network = t.text("network", None)
    if network is not None and not VOLUME_RE.fullmatch(network):
        t.fail(
            "network", f"expected a network's name such as none or bridge, found {shown(network)}"
        )
    return network
