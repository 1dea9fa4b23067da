"""What a lock must look like before anything reads it: the one validator of every lock.

A lock is data. The profile's own is written by `envlock lock` and then lives in a
repository anyone with write access may edit; a snapshot's comes with a stranger's
checkpoint; `diff` reads loose pylock files. `apply` hands a lock's fields to uv, so each
must have its declared shape first: `python-version` is a version (uv runs a path given
there as the interpreter), every package has a PEP 503 name and a PEP 440 version and is
installed from wheels pinned by sha256. An sdist is allowed only for a package the
profile's `[dependencies] build` names (building it runs that package's code); a
directory, repository or archive source never. A failure names the file and the field
(`pylock.seed.toml: packages[3].sdist: ...`), and nothing of a refused lock is used.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envlock.base.tomlread import TOMLDecodeError, tomllib
from envlock.errors import LockError
from envlock.lock.policy import LockPolicy
from envlock.profile.read import PLATFORM_RE, PYTHON_RE
from envlock.schema import (
    INT,
    PACKAGE_NAME,
    SHA256,
    STR,
    Invalid,
    items,
    join,
    mapping,
    matching,
    obj,
    relative_path,
    shown,
)

# -- the shapes ------------------------------------------------------------------------------
PYTHON_VERSION = matching(PYTHON_RE, 'a Python version such as "3.11"')
PYTHON_PLATFORM = matching(PLATFORM_RE, 'a Linux platform such as "x86_64-manylinux_2_28"')
HTTPS_URL = re.compile(r"(https|file)://\S+")
HTTP_URL = re.compile(r"(https?|file)://\S+")
# Sources uv would build from a directory, a repository or an archive: code run at install.
BUILT_FROM_SOURCE = ("directory", "vcs", "archive")


def pep440(value: Any, where: str) -> None:
    STR(value, where)
    try:
        Version(value)
    except InvalidVersion:
        raise Invalid(where, 'a PEP 440 version such as "1.0.2"', value) from None


def artifact_path(value: Any, where: str) -> None:
    """An absolute path, or one relative to the lock that stays below it."""
    STR(value, where)
    parts = value.split("/")
    if "\0" in value or "\\" in value or (not value.startswith("/") and ".." in parts):
        raise Invalid(where, "an absolute path or a relative one without ..", value)


def artifact(http: bool) -> Any:
    url = (
        matching(HTTP_URL, "an http(s):// or file:// URL")
        if http
        else matching(HTTPS_URL, "an https:// or file:// URL")
    )
    return obj(
        {
            "url": url,
            "path": artifact_path,
            "hashes": obj({"sha256": SHA256}, ("sha256",)),
            "size": INT,
            "name": STR,
        }
    )


def locked_package(http: bool) -> Any:
    return obj(
        {
            "name": PACKAGE_NAME,
            "version": pep440,
            "marker": STR,
            "requires-python": STR,
            "index": STR,
            "wheels": items(artifact(http)),
            "sdist": artifact(http),
        },
        ("name", "version"),
    )


# Built once: a lock may list hundreds of packages.
LOCKED_PACKAGE = {http: locked_package(http) for http in (True, False)}
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
        "build": items(PACKAGE_NAME),
        "scripts": mapping(relative_path, SHA256),
    },
    ("python-version",),
)


# -- the checks beyond shapes ------------------------------------------------------------------
def artifacts_of(package: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, artifact) for each wheel and the sdist of a locked package."""
    found = [(f"{join(where, 'wheels')}[{i}]", w) for i, w in enumerate(package.get("wheels", []))]
    if "sdist" in package:
        found.append((join(where, "sdist"), package["sdist"]))
    return found


def filename(artifact: dict[str, Any]) -> str:
    source = artifact.get("url") or artifact.get("path") or ""
    return os.path.basename(unquote(urlsplit(source).path) if "://" in source else source)


def check_package(value: Any, where: str, policy: LockPolicy, build: frozenset[str]) -> str:
    """One `[[packages]]` entry; returns its normalised name."""
    LOCKED_PACKAGE[policy.http](value, where)
    for source in BUILT_FROM_SOURCE:
        if source in value:
            article = "an" if source == "archive" else "a"
            raise Invalid(
                join(where, source), "wheels or an sdist", found=f"{article} {source} source"
            )
    artifacts = artifacts_of(value, where)
    if not artifacts:
        raise Invalid(where, "wheels to install from", found="neither wheels nor an sdist")
    for at, item in artifacts:
        if ("url" in item) == ("path" in item):
            raise Invalid(at, "either a url or a path", item)
        if "hashes" not in item:
            raise Invalid(join(at, "hashes"), "a sha256", found="none")
    name = canonicalize_name(value["name"])
    for index, wheel in enumerate(value.get("wheels", [])):
        check_wheel_name(wheel, name, f"{join(where, 'wheels')}[{index}]")
    if "sdist" in value and name not in build:
        raise Invalid(
            join(where, "sdist"),
            "wheels only",
            found=f"an sdist of {shown(name)} (building it runs its code)",
            hint=sdist_hint(name, policy),
        )
    return name


def check_wheel_name(wheel: dict[str, Any], name: str, where: str) -> None:
    """A wheel's file is a wheel of this very package (uv installs what the file holds)."""
    file = filename(wheel)
    try:
        wheel_name = parse_wheel_filename(file)[0]
    except InvalidWheelFilename:
        raise Invalid(where, "a .whl file", found=shown(file)) from None
    if wheel_name != name:
        raise Invalid(where, f"a wheel of {shown(name)}", found=shown(file))


def sdist_hint(name: str, policy: LockPolicy) -> str:
    if policy.build is None:
        return "the lock's [tool.envlock] build does not name it"
    if policy.origin == "snapshot":
        return "a snapshot's lock never builds from source: rebuild that run from wheels"
    return (
        f'to build it from source, add "{name}" to [dependencies] build in the profile '
        "and run `envlock lock` again"
    )


def check_lock(data: dict[str, Any], where: str, policy: LockPolicy) -> frozenset[str]:
    """A parsed lock, checked; returns the packages it may build from source."""
    tool = data.get("tool")
    if not isinstance(tool, dict) or "envlock" not in tool:
        raise Invalid(where, "a [tool.envlock] table", found="none")
    table = tool["envlock"]
    ENVLOCK_TABLE(table, f"{where} [tool.envlock]".strip())
    declared = frozenset(canonicalize_name(n) for n in table.get("build", []))
    build = declared if policy.build is None else policy.build
    packages = data.get("packages", [])
    at = join(where, "packages")
    if not isinstance(packages, list):
        raise Invalid(at, "a list", packages)
    seen: dict[str, int] = {}
    for index, package in enumerate(packages):
        name = check_package(package, f"{at}[{index}]", policy, build)
        if name in seen:
            raise Invalid(
                f"{at}[{index}].name",
                "each package once",
                found=f"{shown(name)} again (also packages[{seen[name]}])",
            )
        seen[name] = index
    return frozenset(n for n, i in seen.items() if "sdist" in packages[i]) & build


def lock_data(
    text: str, origin: str, policy: LockPolicy, where: str = ""
) -> tuple[dict[str, Any], frozenset[str]]:
    """A lock's text as TOML data, checked field by field, and what it may build; a
    LockError (exit 2) naming `origin` and the field otherwise."""
    label = f"{where}: " if where else ""
    try:
        data = tomllib.loads(text)
    except (TOMLDecodeError, RecursionError) as exc:
        raise LockError(
            f"{origin}: {label}not a valid TOML lock: {exc}", hint=policy.fix or None
        ) from None
    try:
        build = check_lock(data, f"{where}:" if where else "", policy)
    except Invalid as exc:
        raise LockError(f"{origin}: {exc}", hint=exc.hint or policy.fix or None) from None
    return data, build
