"""Profiles: the declared environment, parsed from TOML and validated in full.

Every problem is one `ProfileError` that names the file, the table and key, what was
expected and what was found. Nothing here touches a target or writes a file.

This module reads the file, table by table. The Profile type and its parts live in
profile_types.py, the rules for single fields in profile_fields.py, the [torch] and
[dependencies] tables in profile_packages.py; their public names are importable from here.
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform as host_platform
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from envlock.base.pairs import finish_interrupted
from envlock.base.tomlread import (
    ENV_NAME_RE,
    Table,
    describe,
    loads_toml,
    read_toml_bytes,
    shown,
    suggest,
    suggest_value,
)
from envlock.profile.fields import (
    BACKEND_RE,
    INTERPRETER_ENV,
    JOINED_ENV,
    NAME_RE,
    PLATFORM_RE,
    PYTHON_RE,
    TORCH_FAMILY,
    is_within,
    pass_env_refusal,
    raise_profile,
    slug,
    toml_scalar,
)
from envlock.profile.model import PYTORCH_INDEX, Dependencies, Profile, Scripts, TorchSpec
from envlock.profile.packages import dependencies_of, torch_spec
from envlock.profile.sources import DataSource, read_sources
from envlock.targets.base import Target
from envlock.targets.local_paths import controller_path, default_local_root
from envlock.targets.registry import TARGET_TYPES

if TYPE_CHECKING:
    from envlock.proxmox.settings import Container

__all__ = [
    "BACKEND_RE",
    "INTERPRETER_ENV",
    "JOINED_ENV",
    "PLATFORM_RE",
    "PYTHON_RE",
    "PYTORCH_INDEX",
    "TORCH_FAMILY",
    "Dependencies",
    "Profile",
    "Scripts",
    "TorchSpec",
    "load_profile",
    "parse_profile",
    "pass_env_refusal",
]


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Parse and validate a profile file; raises ProfileError on the first problem."""
    file = Path(path)
    said = finish_interrupted(file)
    if said is not None:
        from envlock import ui

        ui.info(f"envlock: {said}")
    raw = read_toml_bytes(file)
    return _ProfileReader(file, loads_toml(file, raw), raw=raw).read()


def parse_profile(path: str | os.PathLike[str], text: str) -> Profile:
    """Validate profile `text` as if it were the file at `path` (which need not exist)."""
    return _ProfileReader(
        Path(path), loads_toml(Path(path), text.encode()), raw=text.encode()
    ).read()


class _ProfileReader:
    TABLES = (
        "profile",
        "target",
        "container",
        "docker",
        "python",
        "torch",
        "dependencies",
        "cache",
        "env",
        "scripts",
        "run",
        "gpu",
        "data",
    )

    def __init__(self, path: Path, data: dict[str, Any], raw: bytes) -> None:
        self.path = path
        self.raw = raw  # the bytes parsed: read once, through the gate (or not yet a file)
        self.label = str(path)
        self.root = Table(self.label, "", data)

    def table(self, name: str) -> Table | None:
        value = self.root.raw(name, None)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise_profile(self.label, f"[{name}] must be a table, found {describe(value)}")
        return Table(self.label, name, value)

    def read(self) -> Profile:
        for key in self.root.data:
            if key in self.TABLES:
                continue
            if not isinstance(self.root.data[key], dict):
                raise_profile(
                    self.label,
                    f"unknown top-level key `{key}`: every setting belongs in a table",
                    f"put `{key} = ...` under the table it belongs to ([profile], [target], ...)",
                )
            hint = suggest(key, list(self.TABLES), what="tables")
            raise_profile(self.label, f"unknown table [{key}]", hint)
        profile_t = self.required_table("profile")
        name = profile_t.string("name")
        if not NAME_RE.fullmatch(name):
            profile_t.fail(
                "name",
                'expected lowercase letters, digits, "-" and "_" (starting with a letter or digit),'
                f" found {shown(name)}",
                hint=f"it becomes pylock.<name>.toml; try `{slug(name)}`",
            )
        description = profile_t.string("description", "")
        profile_t.finish()

        target = self.read_target(name)
        python_version, python_platform, python_download = self.read_python(target)
        torch = self.read_torch()
        deps = self.read_dependencies(torch)
        container = self.read_container(target)
        cache_dir = self.read_cache(target)
        env = self.read_env()
        scripts = self.read_scripts(target)
        pass_env = self.read_run(env)
        gpu_count = self.read_gpu()
        data = self.read_data(target)
        return Profile(
            path=self.path.resolve(),
            name=name,
            description=description,
            target=target,
            python_version=python_version,
            python_platform=python_platform,
            torch=torch,
            dependencies=deps,
            cache_dir=cache_dir,
            env=env,
            scripts=scripts,
            container=container,
            python_download=python_download,
            pass_env=pass_env,
            gpu_count=gpu_count,
            data=data,
            sha256=hashlib.sha256(self.raw).hexdigest(),
        )

    def required_table(self, name: str) -> Table:
        table = self.table(name)
        if table is None:
            raise_profile(
                self.label,
                f"missing required table [{name}]",
                f"add a [{name}] table (see the docs' profile reference)",
            )
        return table

    # -- [target] ---------------------------------------------------------------------------
    def read_target(self, name: str) -> Target:
        t = self.required_table("target")
        kind = t.string("type")
        target_type = TARGET_TYPES.get(kind)
        if target_type is None:
            t.fail(
                "type",
                f"expected one of {', '.join(TARGET_TYPES)}, found {shown(kind)}",
                hint=suggest_value(kind, list(TARGET_TYPES)),
            )
        remote = target_type.remote
        default_root = None if remote else default_local_root(name)
        root = self.path_value(t, "root", default_root, absolute=remote)
        venv = self.path_value(t, "venv", str(PurePosixPath(root) / "venv"), absolute=remote)
        settings = target_type.read_settings(t, lambda value: str(self.local_path(value)))
        t.finish()
        if is_within(venv, root + "/generations") or venv.rstrip("/") == root.rstrip("/"):
            t.fail(
                "venv",
                f'"{venv}" must not be the root or inside its generations',
                hint="use a path such as <root>/venv or /opt/venv",
            )
        return Target(target_type, root, venv, settings)

    def path_value(self, t: Table, key: str, default: Any, *, absolute: bool) -> Any:
        value = t.text(key, default) if default is not None else t.text(key)
        if absolute and not value.startswith("/"):
            t.fail(
                key,
                f"expected an absolute path on the target, found {shown(value)}",
                hint=f'write it from the filesystem root, e.g. "/{value.lstrip("./~")}"',
            )
        if not absolute:
            value = str(self.local_path(value))
        return value

    def local_path(self, value: str) -> Path:
        """A controller-side path: `~` expanded, relative paths taken from the profile's dir."""
        return controller_path(value, self.path)

    # -- [python] ---------------------------------------------------------------------------
    def read_python(self, target: Target) -> tuple[str, str, bool]:
        t = self.required_table("python")
        version = t.string("version")
        if not PYTHON_RE.fullmatch(version):
            t.fail("version", f'expected a Python version such as "3.11", found {shown(version)}')
        default_platform = "x86_64-manylinux_2_28"
        if not target.remote:
            default_platform = f"{host_platform.machine()}-manylinux_2_28"
        plat = t.string("platform", default_platform)
        if not PLATFORM_RE.fullmatch(plat):
            t.fail(
                "platform",
                f'expected a Linux platform such as "x86_64-manylinux_2_28", found {shown(plat)}',
            )
        download = t.boolean("download", False)
        t.finish()
        return version, plat, download

    # -- [torch], [dependencies]: profile_packages.py ---------------------------------------
    def read_torch(self) -> TorchSpec | None:
        t = self.table("torch")
        return None if t is None else torch_spec(t)

    def read_dependencies(self, torch: TorchSpec | None) -> Dependencies:
        t = self.table("dependencies")
        return Dependencies() if t is None else dependencies_of(t, torch, self.local_path)

    # -- [container] ------------------------------------------------------------------------
    def read_container(self, target: Target) -> Container | None:
        """The container table of the target's type ([container], [docker]); another
        type's is refused by name."""
        for name in sorted({k.container_table for k in TARGET_TYPES.values() if k.read_container}):
            t = self.table(name)
            if t is None:
                continue
            if target.kind.read_container is None or target.kind.container_table != name:
                with_it = [
                    k.name
                    for k in TARGET_TYPES.values()
                    if k.read_container and k.container_table == name
                ]
                what = "a container" if name == "container" else f"[{name}]"
                t.fail(
                    None,
                    f"{what} only applies to {', '.join(with_it)} targets, "
                    f'target type is "{target.type}"',
                    hint=f"remove [{name}] or set [target] type",
                )
            container: Container = target.kind.read_container(t, target.settings)
            return container
        return None

    # -- [cache], [env], [scripts] ----------------------------------------------------------
    def read_cache(self, target: Target) -> str:
        t = self.table("cache")
        default = str(PurePosixPath(target.root) / "cache")
        if t is None:
            return default
        value = self.path_value(t, "dir", default, absolute=target.remote)
        t.finish()
        return value

    def read_env(self) -> dict[str, str]:
        t = self.table("env")
        if t is None:
            return {}
        env: dict[str, str] = {}
        for key, value in t.data.items():
            t.seen.add(key)
            if not ENV_NAME_RE.match(key):
                t.fail(key, "expected an environment variable name (letters, digits, _)")
            if not isinstance(value, str):
                t.fail(
                    key,
                    f"expected a string, found {describe(value)}",
                    hint=None
                    if isinstance(value, dict)
                    else f'quote it: {key} = "{toml_scalar(value)}"',
                )
            if "\0" in value:
                t.fail(key, "environment values cannot contain NUL characters")
            if key in INTERPRETER_ENV:
                t.fail(key, *INTERPRETER_ENV[key])
            env[key] = value
        return env

    def read_data(self, target: Target) -> dict[str, DataSource]:
        """[data] name = source: a path (a file, a directory or a glob) or another kind of
        profile/sources.py's table."""
        t = self.table("data")
        if t is None:
            return {}
        return read_sources(t, lambda key: self.path_value(t, key, None, absolute=target.remote))

    def read_scripts(self, target: Target) -> Scripts | None:
        t = self.table("scripts")
        if t is None:
            return None
        source = self.local_path(t.text("source", "."))
        dest = self.path_value(t, "dest", None, absolute=target.remote)
        files = t.texts("files")
        if not files:
            t.fail("files", "expected at least one file or glob")
        t.finish()
        if not source.is_dir():
            t.fail(
                "source",
                f'"{source}" is not a directory',
                hint="source is relative to the profile's directory",
            )
        scripts = Scripts(source=source, dest=dest, files=tuple(files))
        for pattern in files:
            if not glob.glob(str(source / pattern), recursive=True):
                t.fail("files", f'"{pattern}" matches no file under {source}')
        return scripts

    # -- [run], [gpu] -----------------------------------------------------------------------
    def read_run(self, env: dict[str, str]) -> tuple[str, ...]:
        t = self.table("run")
        if t is None:
            return ()
        names = t.strings("pass-env", [])
        for index, name in enumerate(names):
            key = f"pass-env[{index}]"
            if not ENV_NAME_RE.match(name):
                t.fail(
                    key,
                    f"expected an environment variable name, found {shown(name)}",
                    hint="letters, digits and _, not starting with a digit",
                )
            if name in names[:index]:
                t.fail(key, f'duplicate variable "{name}"', hint="list each variable once")
            refusal = pass_env_refusal(name)
            if refusal:
                t.fail(key, *refusal)
            if name in env:
                # Which value would win is a guess nobody should have to make.
                t.fail(
                    key,
                    f"expected a variable that [env] does not set, found {name} (set in [env])",
                    hint=f"either set {name} in [env] or pass it from the caller, not both",
                )
        t.finish()
        return tuple(names)

    def read_gpu(self) -> int | None:
        t = self.table("gpu")
        if t is None:
            return None
        count: int = t.integer("count", minimum=1)
        t.finish()
        return count
