"""A starter profile, written by `envlock init`: every table explained in a line, valid as
written. Pure: options (or what a survey of an existing environment found) → TOML text.
What it writes for each target type is that type's starter row (targets/registry.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envlock.targets.base import InitFlag, TargetType
from envlock.targets.registry import TARGET_TYPES


@dataclass(frozen=True)
class StarterTarget:
    """Where the environment will live, as `init`'s flags give it: root and venv, and the
    flags of the type's starter row (targets/registry.py), by [target] key."""

    type: str = "local"
    root: str | None = None
    venv: str | None = None
    values: Mapping[str, Any] = field(default_factory=dict)

    def given(self, key: str) -> Any:
        """A flag's value, None when it was not given (or given empty, as `--host ""`)."""
        value = self.values.get(key)
        return None if isinstance(value, (str, tuple, list)) and not value else value


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


def init_flags(types: Mapping[str, TargetType]) -> list[tuple[InitFlag, tuple[str, ...]]]:
    """Every flag of the types' starter rows, once, in the rows' order, with the names of
    the types that take it (its help names them)."""
    flags: dict[str, InitFlag] = {}
    for kind in types.values():
        for flag in kind.starter.flags:
            flags.setdefault(flag.key, flag)
    return [
        (flag, tuple(n for n, k in types.items() if flag in k.starter.flags))
        for flag in flags.values()
    ]


def missing_flags(target: StarterTarget) -> list[InitFlag]:
    """The flags the type cannot do without that were not given."""
    row = TARGET_TYPES[target.type].starter
    return [f for f in row.flags if f.key in row.required and target.given(f.key) is None]


def misplaced_ssh_flags(target: StarterTarget) -> str | None:
    """The refusal when ssh's own flags were given for a type that is not reached over ssh
    (a key or option the user meant would be dropped), else None."""
    types = TARGET_TYPES
    if types[target.type].over_ssh:
        return None
    ssh_own = [flag for flag, _ in init_flags(types) if flag.over_ssh]
    if not any(target.given(flag.key) is not None for flag in ssh_own):
        return None
    over_ssh = " or ".join(name for name, kind in types.items() if kind.over_ssh)
    return f"{' and '.join(f.option for f in ssh_own)} go with --target {over_ssh}"


def default_paths(target: StarterTarget, name: str) -> tuple[str, str]:
    """A root and venv path: the flags', else the type's defaults."""
    row = TARGET_TYPES[target.type].starter
    return target.root or row.root.format(name=name), target.venv or row.venv.format(name=name)


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
    row = TARGET_TYPES[target.type].starter
    lines = [row.explain, "[target]", f"type = {q(target.type)}"]
    for flag in row.flags:
        value = target.given(flag.key)
        value = flag.placeholder if value is None else value
        lines += [f"{flag.key} = {toml_value(value)}"] if value is not None else []
    lines += [
        *row.notes,
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


def toml_value(value: str | int | Sequence[str]) -> str:
    if isinstance(value, str):
        return q(value)
    if isinstance(value, int):
        return str(value)
    return toml_list(value)


def toml_list(values: Sequence[str]) -> str:
    if len(values) <= 3:
        return "[" + ", ".join(q(v) for v in values) + "]"
    return "[\n" + "".join(f"  {q(v)},\n" for v in values) + "]"
