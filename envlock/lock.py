"""Locks: a profile resolved by uv into a PEP 751 `pylock.<name>.toml` plus `[tool.envlock]`.

Torch-family packages are pinned with the backend's local label and taken only from the
backend's index (through an explicit uv index source), unless a find-links location already
holds the pinned wheel (air-gapped clusters, this project's test wheelhouse), in which case
the label pin alone guarantees the right build.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from envlock.atomic import write_atomic
from envlock.errors import LockError, OperationError
from envlock.lock_sources import AskIndex, ask_index, record_index_sources, with_local_copies
from envlock.profile import TORCH_FAMILY, Profile
from envlock.tomlread import TOMLDecodeError, tomllib
from envlock.uvbin import uv_path

LOCK_FORMAT = 2


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    wheels: tuple[dict[str, Any], ...] = ()
    sdist: dict[str, Any] | None = None

    @property
    def sha256s(self) -> set[str]:
        found = {w.get("hashes", {}).get("sha256", "") for w in self.wheels}
        if self.sdist:
            found.add(self.sdist.get("hashes", {}).get("sha256", ""))
        return found - {""}


@dataclass(frozen=True)
class Lock:
    """A parsed lock file."""

    path: Path
    text: str
    packages: dict[str, LockedPackage]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def short_hash(self) -> str:
        """What the lock installs (each package's name, version and artifact hashes, and the
        Python), hashed: the generation's name. Two locks that install the same share one
        generation, wherever their wheels lie."""
        installs = sorted(
            [name, pkg.version, sorted(pkg.sha256s)] for name, pkg in self.packages.items()
        )
        identity = json.dumps([installs, str(self.meta.get("python-version", ""))])
        return hashlib.sha256(identity.encode()).hexdigest()[:12]

    def machine_paths(self) -> list[str]:
        """Wheels the lock names by an absolute local path: it installs only on a machine
        that has them there."""
        return sorted(set(re.findall(r'(?:url = "file://|path = ")(/[^"]+)"', self.text)))

    def install_text(self, cache: Sequence[str] = ()) -> str:
        """The lock as the installer on the target reads it: a `path` relative to the lock
        (wheels kept beside the profile) made absolute, since the installed copy lives
        inside the generation, elsewhere; an index's wheel whose very file lies in a local
        find-links directory of `cache` taken from there."""
        base = self.path.parent.resolve()
        text = re.sub(
            r'path = "([^"/][^"]*)"',
            lambda m: f"path = {json.dumps(str(base / m.group(1)))}",
            self.text,
        )
        return with_local_copies(text, cache) if cache else text

    def versions(self) -> dict[str, str]:
        return {name: pkg.version for name, pkg in self.packages.items()}


def read_lock(path: Path) -> Lock:
    """Parse a pylock file written by `envlock lock`."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise LockError(f"{path}: no lock", hint="run `envlock lock PROFILE` first") from None
    return parse_lock(path, text)


def parse_lock(path: Path, text: str) -> Lock:
    try:
        data = tomllib.loads(text)
    except TOMLDecodeError as exc:
        raise LockError(
            f"{path}: not a valid lock: {exc}", hint="delete it and run `envlock lock PROFILE`"
        ) from None
    packages: dict[str, LockedPackage] = {}
    for entry in data.get("packages", []):
        name = canonicalize_name(entry["name"])
        packages[name] = LockedPackage(
            name=name,
            version=str(entry.get("version", "")),
            wheels=tuple(entry.get("wheels", [])),
            sdist=entry.get("sdist"),
        )
    meta = data.get("tool", {}).get("envlock", {})
    return Lock(path=path, text=text, packages=packages, meta=meta)


# -- staleness ----------------------------------------------------------------------------
def stale_reasons(profile: Profile, lock: Lock) -> list[str]:
    """Why a lock no longer matches its profile (empty when it is fresh)."""
    meta = lock.meta
    reasons = []
    if meta.get("format") != LOCK_FORMAT:
        reasons.append(f"lock format {meta.get('format')!r}, this envlock writes {LOCK_FORMAT}")
    if meta.get("inputs-sha256") != resolution_sha256(profile):
        reasons.append(
            f"{profile.path.name}: what the lock is resolved from changed since it was written"
        )
    scripts = meta.get("scripts", {})
    current = profile.script_hashes()
    for rel in sorted(set(scripts) | set(current)):
        if scripts.get(rel) != current.get(rel):
            what = "added" if rel not in scripts else "removed" if rel not in current else "changed"
            reasons.append(f"script {rel} {what}")
    return reasons


def resolution_sha256(profile: Profile) -> str:
    """The hash of what resolution depends on: Python, platform, torch, dependencies,
    indexes, find-links, offline. Comments, layout, key order, [env], [target] and
    [container] never stale a lock; they take effect at the next apply or run."""
    torch = profile.torch
    deps = profile.dependencies
    here = profile.path.parent
    inputs = {
        "python": [profile.python_version, profile.python_platform],
        "torch": [torch.version, torch.backend, torch.index_url, list(torch.packages)]
        if torch
        else None,
        "dependencies": [
            list(deps.packages),
            deps.index_url,
            list(deps.extra_index_urls),
            # Beside the profile, by their relative path: moving the checkout changes nothing.
            [_relative(link, here) for link in deps.find_links],
            deps.offline,
        ],
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _relative(link: str, directory: Path) -> str:
    try:
        return Path(link).relative_to(directory).as_posix()
    except ValueError:
        return link


def load_fresh_lock(profile: Profile) -> Lock:
    """The profile's lock, refusing a missing or stale one with what to do."""
    lock = read_lock(profile.lock_path)
    reasons = stale_reasons(profile, lock)
    if reasons:
        raise LockError(
            f"{lock.path}: stale lock: " + "; ".join(reasons),
            hint=f"run `envlock lock {_shown(profile.path)}` to refresh it",
        )
    return lock


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# -- resolving ----------------------------------------------------------------------------
def environment_find_links() -> list[str]:
    """Find-links this machine's installers are configured with: uv's and pip's variables,
    then pip's configuration files (uv does not read those, so envlock does)."""
    found: list[str] = []
    for var in ("UV_FIND_LINKS", "PIP_FIND_LINKS"):
        found += [p for p in re.split(r"[\s,]+", os.environ.get(var, "")) if p]
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(pip_config_files())
    for section in ("global", "install"):
        if parser.has_option(section, "find-links"):
            found += parser.get(section, "find-links").split()
    return list(dict.fromkeys(found))


def pip_config_files() -> list[str]:
    if os.environ.get("PIP_CONFIG_FILE"):
        return [os.environ["PIP_CONFIG_FILE"]]
    xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    home = os.path.expanduser("~")
    config_home = os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
    return [
        *(os.path.join(d, "pip", "pip.conf") for d in xdg),
        "/etc/pip.conf",
        os.path.join(home, ".pip", "pip.conf"),
        os.path.join(config_home, "pip", "pip.conf"),
    ]


def find_links_for(profile: Profile) -> list[str]:
    return list(dict.fromkeys([*profile.dependencies.find_links, *environment_find_links()]))


def install_text_for(lock: Lock, profile: Profile) -> str:
    """The lock as the profile's target installs it. On this machine, a wheel the lock names
    by its index URL is taken from a local find-links directory holding the very same file
    (a cache); a remote target has its own disks, and downloads."""
    return lock.install_text(cache=() if profile.target.remote else find_links_for(profile))


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


def resolver_input(profile: Profile, links: list[str]) -> str:
    """The pyproject.toml uv resolves: the requirements plus the torch index source."""
    requirements = [
        *(profile.torch.requirements() if profile.torch else []),
        *profile.dependencies.packages,
    ]
    lines = [
        "[project]",
        'name = "envlock-resolve"',
        'version = "0"',
        f"dependencies = {json.dumps(requirements)}",
    ]
    torch = profile.torch
    if torch is not None and not wheel_in_find_links(links, "torch", torch.pinned_version):
        lines += torch_index_source(profile)
    return "\n".join(lines) + "\n"


def torch_sourced(profile: Profile) -> list[str]:
    """The packages taken from the torch backend's index, when it is consulted."""
    torch = profile.torch
    if torch is None or torch.backend_index is None or profile.dependencies.offline:
        return []
    named = {canonicalize_name(Requirement(p).name) for p in torch.packages}
    return sorted({"torch"} | named & TORCH_FAMILY)


def torch_index_source(profile: Profile) -> list[str]:
    """pyproject.toml lines that take the torch family from the backend's index alone."""
    family = torch_sourced(profile)
    if not family or profile.torch is None:
        return []
    lines = ["", "[tool.uv.sources]"]
    lines += [f'{name} = {{ index = "torch-backend" }}' for name in family]
    return [
        *lines,
        "",
        "[[tool.uv.index]]",
        'name = "torch-backend"',
        f"url = {json.dumps(profile.torch.backend_index)}",
        "explicit = true",
    ]


def torch_index_asker(profile: Profile) -> AskIndex | None:
    """Asks the torch backend's index for a torch-family release. uv skips that index when
    find-links already hold torch (an air-gapped cluster may never reach it), so it is
    asked afterwards whether it serves the very wheel found. None when offline."""
    family = torch_sourced(profile)
    if not family:
        return None

    def ask(name: str, version: str) -> list[dict[str, Any]]:
        if canonicalize_name(name) not in family:
            return []
        project = "\n".join(
            [
                "[project]",
                'name = "envlock-index"',
                'version = "0"',
                f"dependencies = {json.dumps([f'{name}=={version}'])}",
                *torch_index_source(profile),
            ]
        )
        return ask_index(
            project,
            name,
            lambda given, output: [*uv_compile_argv(profile, given, output, []), "--no-deps"],
        )

    return ask


def uv_compile_argv(
    profile: Profile, input_file: Path, output: Path, links: list[str]
) -> list[str]:
    deps = profile.dependencies
    argv = [
        uv_path(),
        "pip",
        "compile",
        str(input_file),
        "--quiet",
        "--format",
        "pylock.toml",
        "--generate-hashes",
        "--no-header",
        "--python-version",
        profile.python_version,
        "--python-platform",
        profile.python_platform,
        "--output-file",
        str(output),
    ]
    if not profile.python_download:
        # uv would otherwise spend seconds trying to fetch a managed CPython, unasked.
        argv.append("--no-python-downloads")
    if deps.offline:
        argv += ["--no-index", "--offline"]
    else:
        if deps.index_url:
            argv += ["--default-index", deps.index_url]
        for url in deps.extra_index_urls:
            argv += ["--index", url]
    for link in links:
        argv += ["--find-links", link]
    return argv


def envlock_table(profile: Profile) -> str:
    """The `[tool.envlock]` table, written by hand: flat strings only, stable order."""
    torch = profile.torch
    entries: dict[str, str | int] = {
        "format": LOCK_FORMAT,
        "profile": profile.name,
        "inputs-sha256": resolution_sha256(profile),
        "python-version": profile.python_version,
        "python-platform": profile.python_platform,
        "torch-backend": torch.backend if torch else "",
        "torch": torch.pinned_version if torch else "",
    }
    lines = ["", "[tool.envlock]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in entries.items()]
    lines += ["", "[tool.envlock.scripts]"]
    lines += [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in profile.script_hashes().items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    # A JSON string with ASCII escapes is a valid TOML basic string, DEL aside.
    return json.dumps(value, ensure_ascii=True).replace("\x7f", "\\u007f")


class ResolutionFailed(OperationError):
    """uv found no set of packages that satisfies the profile; `reason` is uv's account."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


def resolve(profile: Profile, *, extra_args: tuple[str, ...] = ()) -> str:
    """Run uv to resolve the profile; returns the full lock text. `extra_args` go to
    `uv pip compile` as they are (`envlock add` asks for `--no-deps` to find a newest)."""
    links = find_links_for(profile)
    import tempfile  # resolving only: checks and runs read a lock, never resolve

    with tempfile.TemporaryDirectory(prefix="envlock-lock-") as tmp:
        input_file = Path(tmp) / "pyproject.toml"
        write_atomic(input_file, resolver_input(profile, links).encode())
        output = Path(tmp) / f"pylock.{profile.name}.toml"
        argv = [*uv_compile_argv(profile, input_file, output, links), *extra_args]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            reason = _clean_uv_error(proc.stderr, tmp)
            raise ResolutionFailed(
                f"uv could not resolve {profile.path.name}:\n{reason}",
                reason=reason,
                hint=_resolve_hint(profile, links),
            )
        here = profile.path.parent.resolve()
        body = record_index_sources(output.read_text(), here, torch_index_asker(profile))
        body = relative_to_profile(body, here)
    return body.rstrip("\n") + "\n" + envlock_table(profile)


def relative_to_profile(body: str, directory: Path) -> str:
    """Wheels found under the profile's directory are recorded by a `path` relative to the
    lock (PEP 751), so the lock travels with the repository that holds them."""

    def relative(match: re.Match[str]) -> str:
        target = Path(match.group(1))
        try:
            rel = target.relative_to(directory)
        except ValueError:
            return match.group(0)
        return f"path = {json.dumps(rel.as_posix())}"

    return re.sub(r'url = "file://(/[^"]+)"', relative, body)


def _clean_uv_error(stderr: str, tmp: str) -> str:
    """uv's words, without our temp dir or the name of the project envlock resolves."""
    text = stderr.replace(tmp + "/", "").replace("envlock-resolve", "the profile")
    return "\n".join("  " + line for line in text.strip().splitlines())


def _resolve_hint(profile: Profile, links: list[str]) -> str:
    torch = profile.torch
    if (
        torch
        and torch.backend_index
        and not wheel_in_find_links(links, "torch", torch.pinned_version)
    ):
        return (
            f"torch {torch.pinned_version} is taken from {torch.backend_index}: is it "
            "reachable? Otherwise set [torch] index-url to a mirror, or put the wheel in "
            "[dependencies] find-links"
        )
    return "check the package names and versions; is the index reachable?"


def write_lock(profile: Profile) -> tuple[Lock, bool]:
    """Resolve and write the lock atomically; returns (lock, changed)."""
    text = resolve(profile)
    path = profile.lock_path
    old = path.read_text() if path.exists() else None
    if old != text:
        write_atomic(path, text.encode())
    return parse_lock(path, text), old != text
