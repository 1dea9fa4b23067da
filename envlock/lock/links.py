"""Which find-links a resolution reads, and which local paths a lock makes its target need.

This machine's installers may be configured with find-links (pip's configuration files,
`PIP_FIND_LINKS`, `UV_FIND_LINKS`). For a local target resolving online they are inputs: the
target is this machine, which has them. For a remote target, and for an offline profile
(whose sources are the ones it declares), they are not: a lock resolved from them would name
files only this machine has, and uv on the target installs a wheel from its first URL.
"""

from __future__ import annotations

import configparser
import os
import re
from pathlib import Path
from urllib.parse import unquote

from packaging.utils import canonicalize_name, parse_wheel_filename

from envlock.base.ownership import untrusted
from envlock.base.untrusted import read_named
from envlock.errors import EnvlockError
from envlock.profile.read import Profile

# Variables uv reads by itself that name where packages come from: a resolution that must
# use the profile's sources alone runs without them.
UV_SOURCES = ("UV_FIND_LINKS", "UV_INDEX", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL")
# A wheel a lock names by a local path: a file URL (absolute) or a PEP 751 `path`.
LOCAL_WHEEL = re.compile(r'(?:url = "file://|path = ")([^"]+)"')


def environment_find_links() -> list[str]:
    """Find-links this machine's installers are configured with: uv's and pip's variables,
    then pip's configuration files (uv does not read those, so envlock does)."""
    found: list[str] = []
    for var in ("UV_FIND_LINKS", "PIP_FIND_LINKS"):
        found += [p for p in re.split(r"[\s,]+", os.environ.get(var, "")) if p]
    parser = configparser.ConfigParser(interpolation=None)
    for path in pip_config_files():
        text = pip_config_text(path)
        if text is None:
            continue
        try:
            parser.read_string(text, source=path)
        except configparser.Error:
            continue  # pip itself would refuse it: no find-links from it
    for section in ("global", "install"):
        if parser.has_option(section, "find-links"):
            found += parser.get(section, "find-links").split()
    return list(dict.fromkeys(found))


def pip_config_text(path: str) -> str | None:
    """A pip configuration file's text, when it is yours or root's to trust (another user's
    `XDG_CONFIG_DIRS` entry would choose the wheels root installs) and the gate lets it
    through (a FIFO there would block every resolution); None otherwise."""
    try:
        if untrusted(path) is not None:
            return None
        return read_named(path, "config").decode("utf-8", errors="replace")
    except (OSError, EnvlockError):
        return None


def pip_config_files() -> list[str]:
    if os.environ.get("PIP_CONFIG_FILE"):
        return [os.environ["PIP_CONFIG_FILE"]]
    xdg = [d for d in os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    home = os.path.expanduser("~")
    config_home = os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
    return [
        *(os.path.join(d, "pip", "pip.conf") for d in xdg),
        "/etc/pip.conf",
        os.path.join(home, ".pip", "pip.conf"),
        os.path.join(config_home, "pip", "pip.conf"),
    ]


def own_sources_only(profile: Profile) -> bool:
    """Whether the profile resolves from its own find-links and indexes alone: a remote
    target has its own disks, and an offline profile declares every source it has."""
    return profile.target.remote or profile.dependencies.offline


def find_links_for(profile: Profile) -> list[str]:
    """The find-links uv resolves the profile from."""
    links = list(profile.dependencies.find_links)
    if not own_sources_only(profile):
        links += environment_find_links()
    return list(dict.fromkeys(links))


def resolver_env(profile: Profile) -> dict[str, str] | None:
    """The environment uv resolves in: without this machine's source variables when the
    profile resolves from its own sources alone (None: envlock's own, unchanged)."""
    if not own_sources_only(profile):
        return None
    return {k: v for k, v in os.environ.items() if k not in UV_SOURCES}


def cache_links(profile: Profile) -> list[str]:
    """Local directories whose very files (same name, same sha256) may stand in for a
    download when this machine installs the lock: none for a remote target."""
    if profile.target.remote:
        return []
    return list(dict.fromkeys([*profile.dependencies.find_links, *environment_find_links()]))


def wheel_in_find_links(links: list[str], name: str, version: str) -> bool:
    """Whether a local find-links directory holds a wheel of exactly name==version."""
    wanted = canonicalize_name(name)
    for link in links:
        directory = Path(link.removeprefix("file://"))
        if not directory.is_dir():
            continue
        for wheel in directory.glob("*.whl"):
            try:
                wname, wversion, _, _ = parse_wheel_filename(wheel.name)
            except ValueError:
                continue
            if wname == wanted and str(wversion) == version:
                return True
    return False


def local_wheels(text: str, directory: Path) -> list[Path]:
    """Every wheel a lock text names by a local path, absolute (a relative `path` lies
    beside the lock, in `directory`)."""
    found = {unquote(m) for m in LOCAL_WHEEL.findall(text)}
    return sorted({Path(p) if p.startswith("/") else directory.resolve() / p for p in found})


def target_paths(profile: Profile, text: str, directory: Path) -> list[str]:
    """The local directories a remote target must also have: where the lock's local wheels
    lie, by the absolute path it installs them from. None for a local target (it is here)."""
    if not profile.target.remote:
        return []
    return sorted({str(wheel.parent) for wheel in local_wheels(text, directory)})


def undeclared(profile: Profile, text: str, directory: Path) -> list[str]:
    """Local wheels of a lock outside the profile's own find-links and directory, when it
    must use its own sources alone: only a source of this machine (a uv configuration file)
    can have put them there."""
    if not own_sources_only(profile):
        return []
    allowed = [directory.resolve()]
    for link in profile.dependencies.find_links:
        if not re.match(r"[a-z]+://", link) or link.startswith("file://"):
            allowed.append(Path(unquote(link.removeprefix("file://"))).resolve())
    # The wheel's directory is resolved, not the wheel: a find-links directory may hold
    # links to wheels kept elsewhere, and those are its wheels.
    return [
        str(wheel)
        for wheel in local_wheels(text, directory)
        if not any((wheel.parent.resolve() / wheel.name).is_relative_to(base) for base in allowed)
    ]
