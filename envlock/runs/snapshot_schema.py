"""What a snapshot must look like before anything reads it, field by field.

Snapshots travel with checkpoints, and checkpoints come from strangers: a snapshot is data,
validated like a profile. Every field a consumer reads (diff, apply --from-snapshot) has a
declared type here, and the embedded lock is checked too: its Python version and platform,
package names, hashes and where each wheel comes from, since `apply --from-snapshot` hands
them to uv. A failure names the field: `snapshot.json: lock.text: expected a string, found 3`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from envlock.errors import UsageError
from envlock.profile import PLATFORM_RE, PYTHON_RE
from envlock.tomlread import TOMLDecodeError, tomllib

Check = Callable[[Any, str], None]


class Invalid(Exception):
    """A field that does not have the declared shape: where, what was expected, what was found."""

    def __init__(self, where: str, expected: str, value: Any = None, *, found: str = "") -> None:
        prefix = f"{where.rstrip(':')}: " if where else ""
        super().__init__(f"{prefix}expected {expected}, found {found or shown(value)}")


def join(where: str, name: str) -> str:
    """`lock.text`, `packages[0].name`, `[tool.envlock] python-version`."""
    if not where:
        return name
    if where.endswith(":"):
        return f"{where} {name}"
    if where.endswith("]") and where.rsplit(" ", 1)[-1].startswith("["):
        return f"{where} {name}"
    return f"{where}.{name}"


def shown(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the checks, small and composable -------------------------------------------------------
def kind(types: type | tuple[type, ...], expected: str) -> Check:
    allowed = types if isinstance(types, tuple) else (types,)

    def check(value: Any, where: str) -> None:
        # JSON's true is no integer, whatever Python's bool says.
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise Invalid(where, expected, value)

    return check


STR = kind(str, "a string")
INT = kind(int, "an integer")
BOOL = kind(bool, "true or false")
NUMBER = kind((int, float), "a number")


def matching(pattern: re.Pattern[str], expected: str) -> Check:
    def check(value: Any, where: str) -> None:
        STR(value, where)
        if not pattern.fullmatch(value):
            raise Invalid(where, expected, value)

    return check


def nullable(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if value is not None:
            inner(value, where)

    return check


def obj(fields: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """A JSON object (TOML table) whose listed fields have their shapes; others are ignored
    (nothing reads them), so a newer envlock's extra fields stay readable."""

    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Invalid(where, "an object", value)
        for name in required:
            if name not in value:
                raise Invalid(join(where, name), "a value", found="nothing (missing)")
        for name, inner in fields.items():
            if name in value:
                inner(value[name], join(where, name))

    return check


def mapping(keys: Check, values: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Invalid(where, "an object", value)
        for key, item in value.items():
            keys(key, f"{where} key {shown(key)}")
            values(item, join(where, str(key)))

    return check


def items(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise Invalid(where, "a list", value)
        for index, item in enumerate(value):
            inner(item, f"{where}[{index}]")

    return check


def json_data(max_depth: int) -> Check:
    """Any JSON value (a run's config), nested no deeper than `max_depth`."""

    def check(value: Any, where: str, depth: int = 0) -> None:
        if depth > max_depth:
            raise Invalid(where, f"data nested at most {max_depth} deep", found="deeper")
        if isinstance(value, dict):
            for key, item in value.items():
                check(item, join(where, str(key)), depth + 1)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                check(item, f"{where}[{index}]", depth + 1)

    return check


# -- names, hashes, paths ---------------------------------------------------------------------
PACKAGE_NAME = matching(
    re.compile(r"([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])"), "a package name"
)
SHA256 = matching(re.compile(r"[0-9a-f]{64}"), "a sha256 (64 hex digits)")
PYTHON_VERSION = matching(PYTHON_RE, 'a Python version such as "3.11"')
PYTHON_PLATFORM = matching(PLATFORM_RE, 'a Linux platform such as "x86_64-manylinux_2_28"')
WHEEL_URL = matching(re.compile(r"(https|file)://\S+"), "an https:// or file:// URL")
ABSOLUTE_PATH = matching(re.compile(r"/[^\0]*"), "an absolute path")


def relative_path(value: Any, where: str) -> None:
    """A script's path below the scripts directory: never absolute, never `..`."""
    STR(value, where)
    parts = value.split("/")
    if value.startswith("/") or "\0" in value or "\\" in value or "" in parts or ".." in parts:
        raise Invalid(where, "a relative path inside the scripts directory", value)


# -- the snapshot -----------------------------------------------------------------------------
OPT_STR = nullable(STR)
SNAPSHOT = obj(
    {
        "schema": INT,
        "created": OPT_STR,
        "envlock": OPT_STR,
        "profile": obj({"name": STR, "path": OPT_STR, "sha256": OPT_STR}, ("name",)),
        "lock": obj({"sha256": OPT_STR, "text": STR}, ("text",)),
        "generation": OPT_STR,
        "python": OPT_STR,
        "platform": nullable(obj({"machine": OPT_STR, "libc": OPT_STR})),
        "packages": nullable(mapping(PACKAGE_NAME, STR)),
        "torch": nullable(
            obj(
                {
                    "version": STR,
                    "local": OPT_STR,
                    "cuda": OPT_STR,
                    "hip": OPT_STR,
                    "git_version": OPT_STR,
                    "cudnn": OPT_STR,
                    "cuda_requires": items(STR),
                },
                ("version",),
            )
        ),
        "hardware": nullable(
            obj({"driver": OPT_STR, "gpus": items(obj({"name": OPT_STR, "capability": OPT_STR}))})
        ),
        "scripts": nullable(
            obj({"dest": OPT_STR, "sha256": mapping(relative_path, nullable(SHA256))})
        ),
        "env": nullable(mapping(STR, STR)),
        "cache": nullable(
            obj(
                {
                    "dir": STR,
                    "fingerprint": obj({"id": STR, "parts": json_data(8)}),
                    "exists": BOOL,
                    "files": INT,
                    "bytes": INT,
                    "last_used": nullable(NUMBER),
                }
            )
        ),
        "host": nullable(obj({"hostname": OPT_STR, "container": OPT_STR, "target": OPT_STR})),
        "command": nullable(items(STR)),
        "git": nullable(obj({"commit": STR, "dirty": BOOL})),
        "config": json_data(64),
        "process": nullable(
            obj(
                {
                    "argv": items(STR),
                    "rank": INT,
                    "local_rank": nullable(INT),
                    "world_size": INT,
                }
            )
        ),
    },
    ("schema", "profile", "lock"),
)

# -- the lock inside it (PEP 751, as `envlock lock` writes it) ---------------------------------
ARTIFACT = obj({"url": WHEEL_URL, "path": ABSOLUTE_PATH, "hashes": obj({"sha256": SHA256})})
LOCKED_PACKAGE = obj(
    {"name": PACKAGE_NAME, "version": STR, "wheels": items(ARTIFACT), "sdist": ARTIFACT},
    ("name", "version"),
)
ENVLOCK_TABLE = obj(
    {
        "format": INT,
        "profile": STR,
        "profile-sha256": STR,
        "inputs-sha256": STR,
        "python-version": PYTHON_VERSION,
        "python-platform": PYTHON_PLATFORM,
        "torch-backend": STR,
        "torch": STR,
        "scripts": mapping(relative_path, SHA256),
    },
    ("python-version",),
)
# Sources uv would build from a directory or a repository: code run at install time.
BUILT_FROM_SOURCE = ("directory", "vcs", "archive")


def check_package(value: Any, where: str) -> None:
    LOCKED_PACKAGE(value, where)
    for source in BUILT_FROM_SOURCE:
        if source in value:
            raise Invalid(join(where, source), "wheels or an sdist", found=f"a {source} source")
    artifacts = artifacts_of(value, where)
    if not artifacts:
        raise Invalid(where, "wheels or an sdist to install from", found="neither")
    for at, artifact in artifacts:
        if ("url" in artifact) == ("path" in artifact):
            raise Invalid(at, "either a url or a path", artifact)
        if "hashes" not in artifact:
            raise Invalid(join(at, "hashes"), "a sha256", found="none")


def artifacts_of(package: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, artifact) for each wheel and the sdist of a locked package."""
    found = [(f"{join(where, 'wheels')}[{i}]", w) for i, w in enumerate(package.get("wheels", []))]
    if "sdist" in package:
        found.append((join(where, "sdist"), package["sdist"]))
    return found


def check_lock_data(data: dict[str, Any], where: str) -> None:
    items(check_package)(data.get("packages", []), join(where, "packages"))
    tool = data.get("tool")
    if not isinstance(tool, dict) or "envlock" not in tool:
        raise Invalid(where, "a [tool.envlock] table", found="none")
    ENVLOCK_TABLE(tool["envlock"], f"{where} [tool.envlock]".strip())


def lock_sources(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, url or path) of every artifact of a checked lock."""
    return [
        (at, artifact.get("url") or artifact["path"])
        for index, package in enumerate(data.get("packages", []))
        for at, artifact in artifacts_of(package, f"lock.text: packages[{index}]")
    ]


# -- entry points ------------------------------------------------------------------------------
def validate_snapshot(data: Any, origin: str) -> dict[str, Any]:
    """The snapshot document, checked; UsageError naming the file and the field otherwise."""
    try:
        SNAPSHOT(data, "")
    except Invalid as exc:
        raise UsageError(f"{origin}: {exc}") from None
    parse_lock_text(data["lock"]["text"], origin)
    return data


def parse_lock_text(text: str, origin: str, where: str = "lock.text") -> dict[str, Any]:
    """An embedded lock (or a lock file, `where` = "") as TOML data, checked field by field."""
    label = f"{where}: " if where else ""
    try:
        data = tomllib.loads(text)
    except (TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"{origin}: {label}not a valid TOML lock: {exc}") from None
    try:
        check_lock_data(data, f"{where}:" if where else "")
    except Invalid as exc:
        raise UsageError(f"{origin}: {exc}") from None
    return data


# -- where a snapshot's wheels may come from, on this machine ------------------------------------
def local_path(source: str) -> str | None:
    """The local path a file:// URL or a path names (None for https://, or a remote host)."""
    if source.startswith("https://"):
        return None
    if source.startswith("file://"):
        parts = urlsplit(source)
        if parts.netloc not in ("", "localhost"):
            return ""
        return os.path.normpath(unquote(parts.path))
    return os.path.normpath(source)


def check_sources(lock_data: dict[str, Any], find_links: list[str], origin: str) -> None:
    """Every wheel comes from https:// or from inside one of the profile's local find-links:
    a stranger's snapshot names no other file on this machine to install."""
    roots = [p for p in (local_path(link) for link in find_links) if p]
    for where, source in lock_sources(lock_data):
        path = local_path(source)
        if path is None or any(path.startswith(root.rstrip("/") + "/") for root in roots):
            continue
        raise UsageError(
            f"{origin}: {where}: {shown(source)} is neither https:// nor inside the profile's "
            f"find-links ({', '.join(roots) or 'none'})",
            hint="a snapshot's wheels must come from an index over https or from the "
            "profile's [dependencies] find-links",
        )
