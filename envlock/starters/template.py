"""A starter profile, written by `envlock init`: every table explained in a line, valid as
written. Pure: options (or what a survey of an existing environment found) → TOML text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StarterType:
    """What a starter of one target type says and needs: every fact `init` and the starter
    text read about a type lives in its row of STARTER_TYPES, nowhere else."""

    explain: str  # the comment above [target]
    root: str  # default root and venv ({name}: the profile's); relative: beside the profile
    venv: str
    required: tuple[str, ...] = ()  # the flags (as `init` names them) it cannot do without
    over_ssh: bool = False  # reached over ssh: host, user, port and the ssh flags apply
    container: bool = False  # a Proxmox container: node, vmid and api-url apply


STARTER_TYPES = {
    "local": StarterType(
        "# Where: this machine. Relative paths are taken from this file's directory.",
        root=".envlock/{name}",
        venv=".envlock/{name}/venv",
    ),
    "ssh": StarterType(
        "# Where: a host reached over ssh (your ssh config and keys are used).",
        root="/opt/envlock",
        venv="/opt/venv",
        required=("host",),
        over_ssh=True,
    ),
    "proxmox-lxc": StarterType(
        "# Where: a Proxmox LXC container, reached over ssh to its node and `pct exec`.",
        root="/opt/envlock",
        venv="/opt/venv",
        required=("host", "vmid"),
        over_ssh=True,
        container=True,
    ),
}
TARGET_TYPES = tuple(STARTER_TYPES)
FLAG_EXAMPLES = {"host": "--host pve1", "vmid": "--vmid 200"}
SSH_FLAGS = ("identity_file", "ssh_options")


@dataclass(frozen=True)
class StarterTarget:
    """Where the environment will live, as `init`'s flags give it."""

    type: str = "local"
    host: str | None = None
    user: str | None = None
    port: int | None = None
    node: str | None = None
    vmid: int | None = None
    api_url: str | None = None
    root: str | None = None
    venv: str | None = None
    identity_file: str | None = None
    ssh_options: Sequence[str] = ()


@dataclass(frozen=True)
class Starter:
    """What goes into the profile: the declared environment."""

    name: str
    target: StarterTarget
    python: str
    platform: str | None = None
    torch: str | None = None
    backend: str | None = None
    torch_packages: Sequence[str] = ()
    packages: Sequence[str] = ()
    find_links: Sequence[str] = ()
    index_url: str | None = None
    extra_index_urls: Sequence[str] = ()
    offline: bool = False
    description: str = ""
    notes: Sequence[str] = field(default_factory=tuple)


def missing_flags(target: StarterTarget) -> list[str]:
    required = STARTER_TYPES[target.type].required
    return [f for f in required if getattr(target, f) is None]


def misplaced_ssh_flags(target: StarterTarget) -> bool:
    """Whether ssh's own flags were given for a type that is not reached over ssh."""
    given = any(getattr(target, f) for f in SSH_FLAGS)
    return given and not STARTER_TYPES[target.type].over_ssh


def ssh_types() -> str:
    return " or ".join(name for name, kind in STARTER_TYPES.items() if kind.over_ssh)


def default_paths(target: StarterTarget, name: str) -> tuple[str, str]:
    """A root and venv path: the flags', else the type's defaults."""
    kind = STARTER_TYPES[target.type]
    return target.root or kind.root.format(name=name), target.venv or kind.venv.format(name=name)


def starter_text(starter: Starter) -> str:
    """The profile, commented; optional tables are shown commented out."""
    name = starter.name
    lines = [
        f"# envlock profile {q(name)}. `envlock lock` resolves it into pylock.{name}.toml beside",
        "# this file; `envlock apply` builds that lock on the target as a new generation.",
        *(f"# {note}" for note in starter.notes),
        "",
        "# Who this environment is: its name names the lock and the generations.",
        "[profile]",
        f"name = {q(name)}",
        f"description = {q(starter.description or 'describe what this environment trains')}",
        "",
        *target_lines(starter.target, name),
        "",
        "# The interpreter uv builds the venv with (it must exist on the target, or set",
        "# download = true to let uv fetch a managed CPython).",
        "[python]",
        f"version = {q(starter.python)}",
        *([f"platform = {q(starter.platform)}"] if starter.platform else []),
        "",
        *torch_lines(starter),
        "",
        "# Training dependencies, as pip requirements; find-links and index-url for boxes that",
        "# reach no public index.",
        "[dependencies]",
        f"packages = {toml_list(starter.packages)}",
        *([f"find-links = {toml_list(starter.find_links)}"] if starter.find_links else []),
        *([f"index-url = {q(starter.index_url)}"] if starter.index_url else []),
        *(["offline = true"] if starter.offline else []),
        *(
            [f"extra-index-urls = {toml_list(starter.extra_index_urls)}"]
            if starter.extra_index_urls
            else []
        ),
        "",
        "# Variables every `envlock run` sets (the generation's bin always comes first on PATH).",
        "[env]",
        '# OMP_NUM_THREADS = "8"',
        "",
        "# Where torch.compile and Triton keep their caches, one directory per build.",
        "# [cache]",
        '# dir = "/workspace/.cache/envlock"',
        "",
        "# Training scripts whose sha256 the lock pins; apply deploys them to dest.",
        "# [scripts]",
        '# source = "scripts"',
        '# dest = "/workspace/train"',
        '# files = ["train.py"]',
        "",
    ]
    return "\n".join(lines)


def target_lines(target: StarterTarget, name: str) -> list[str]:
    root, venv = default_paths(target, name)
    kind = STARTER_TYPES[target.type]
    lines = [kind.explain, "[target]", f"type = {q(target.type)}"]
    if kind.over_ssh:
        lines.append(f"host = {q(target.host or 'HOST')}")
        lines += [f"user = {q(target.user)}"] if target.user else []
        lines += [f"port = {target.port}"] if target.port else []
        lines += [f"identity-file = {q(target.identity_file)}"] if target.identity_file else []
        lines += [f"ssh-options = {toml_list(target.ssh_options)}"] if target.ssh_options else []
    if kind.container:
        lines += [f"node = {q(target.node)}"] if target.node else []
        lines.append(f"vmid = {target.vmid if target.vmid is not None else 100}")
        lines += [f"api-url = {q(target.api_url)}"] if target.api_url else []
        lines += [
            "# The API secret (for [container] provisioning) comes from the environment:",
            '# secret-env = "PVE_PASSWORD"',
        ]
    lines += [
        "# Generations are built under root; venv is a link to the active one.",
        f"root = {q(root)}",
        f"venv = {q(venv)}",
    ]
    return lines


def torch_lines(starter: Starter) -> list[str]:
    explain = [
        "# torch and its build: backend cpu, cu126, cu128, cu130 … (the PyTorch index's",
        "# names), or pypi for PyPI's own build.",
    ]
    if starter.torch is None:
        return [*explain, "# [torch]", '# version = "2.13.0"', '# backend = "cpu"']
    return [
        *explain,
        "[torch]",
        f"version = {q(starter.torch)}",
        f"backend = {q(starter.backend or 'cpu')}",
        *([f"packages = {toml_list(starter.torch_packages)}"] if starter.torch_packages else []),
    ]


def q(value: str) -> str:
    # A JSON string with ASCII escapes is a valid TOML basic string (DEL aside).
    return json.dumps(value, ensure_ascii=True).replace("\x7f", "\\u007f")


def toml_list(values: Sequence[str]) -> str:
    if len(values) <= 3:
        return "[" + ", ".join(q(v) for v in values) + "]"
    return "[\n" + "".join(f"  {q(v)},\n" for v in values) + "]"
