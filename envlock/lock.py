"""Locks: a profile resolved by uv into a PEP 751 `pylock.<name>.toml` plus `[tool.envlock]`.

Torch-family packages are pinned with the backend's local label and taken only from the
backend's index (through an explicit uv index source), unless a find-links location already
holds the pinned wheel (air-gapped clusters, this project's test wheelhouse), in which case
the label pin alone guarantees the right build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envlock.atomic import write_atomic
from envlock.errors import EXIT_USAGE, EnvlockError, LockError, OperationError
from envlock.lock_indexes import uv_index_env, without_credentials
from envlock.lock_links import (
    cache_links,
    environment_find_links,
    find_links_for,
    own_sources_only,
    resolver_env,
    undeclared,
    wheel_in_find_links,
)
from envlock.lock_schema import STRICT, LockPolicy, lock_data, profile_policy
from envlock.lock_sources import AskIndex, ask_index, record_index_sources, with_local_copies
from envlock.profile import TORCH_FAMILY, Profile
from envlock.runs.secrets import redact_text
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
    # The packages it may build from source (each has an sdist the policy allows).
    build: frozenset[str] = frozenset()
    # How it was read: what its install may do (build, .pth files), by where it came from.
    policy: LockPolicy = STRICT

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


def read_lock(path: Path, policy: LockPolicy = STRICT) -> Lock:
    """Read and validate a lock file (see lock_schema: the one validator)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise LockError(f"{path}: no lock", hint="run `envlock lock PROFILE` first") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"{path}: cannot read the lock: {exc}") from None
    return parse_lock(path, text, policy)


def parse_lock(path: Path, text: str, policy: LockPolicy = STRICT, *, where: str = "") -> Lock:
    """The one way to a `Lock`: the text validated field by field under `policy` (what it
    may build, where its wheels may come from), refused whole otherwise (LockError, exit 2,
    naming `path`, or `path` and `where` for a lock inside a snapshot)."""
    data, build = lock_data(text, str(path), policy, where)
    packages: dict[str, LockedPackage] = {}
    for entry in data.get("packages", []):
        name = canonicalize_name(entry["name"])
        packages[name] = LockedPackage(
            name=name,
            version=entry["version"],
            wheels=tuple(entry.get("wheels", [])),
            sdist=entry.get("sdist"),
        )
    meta = data["tool"]["envlock"]
    return Lock(path=path, text=text, packages=packages, meta=meta, build=build, policy=policy)


def lock_policy(profile: Profile) -> LockPolicy:
    """How the profile's own lock is read: it may build what `[dependencies] build` names."""
    return profile_policy(profile.dependencies.build, _shown(profile.path))


# -- staleness ----------------------------------------------------------------------------
def stale_reasons(profile: Profile, lock: Lock) -> list[str]:
    """Why a lock no longer matches its profile (empty when it is fresh)."""
    meta = lock.meta
    reasons = []
    if meta.get("format") != LOCK_FORMAT:
        reasons.append(f"lock format {meta.get('format')!r}, this envlock writes {LOCK_FORMAT}")
    if meta.get("inputs-sha256") != resolution_sha256(profile):
        reasons += changed_inputs(profile, meta.get("inputs"))
    scripts = meta.get("scripts", {})
    current = profile.script_hashes()
    for rel in sorted(set(scripts) | set(current)):
        if scripts.get(rel) != current.get(rel):
            what = "added" if rel not in scripts else "removed" if rel not in current else "changed"
            reasons.append(f"script {rel} {what}")
    return reasons


def changed_inputs(profile: Profile, recorded: object) -> list[str]:
    """Each resolution input whose digest differs from the one the lock recorded; a lock
    written before inputs were recorded one by one gets the general reason."""
    name = profile.path.name
    if isinstance(recorded, dict):
        now = input_digests(profile)
        changed = [key for key in now if recorded.get(key) != now[key]]
        changed += [key for key in recorded if key not in now]
        if changed:
            return [f"{name}: {key} changed since the lock was written" for key in changed]
    return [f"{name}: what the lock is resolved from changed since it was written"]


def resolution_inputs(profile: Profile) -> dict[str, Any]:
    """What resolution depends on, by the profile's own names: Python, platform, torch,
    dependencies, indexes, find-links, offline. Comments, layout, key order, [env],
    [target] and [container] never stale a lock; they take effect at the next apply or run."""
    torch = profile.torch
    deps = profile.dependencies
    here = profile.path.parent
    inputs: dict[str, Any] = {
        "[python] version": profile.python_version,
        "[python] platform": profile.python_platform,
        "[torch] version": torch.version if torch else None,
        "[torch] backend": torch.backend if torch else None,
        "[torch] index-url": torch.index_url if torch else None,
        "[torch] packages": list(torch.packages) if torch else None,
        "[dependencies] packages": list(deps.packages),
        "[dependencies] index-url": deps.index_url,
        "[dependencies] extra-index-urls": list(deps.extra_index_urls),
        # Beside the profile, by their relative path: moving the checkout changes nothing.
        "[dependencies] find-links": [_relative(link, here) for link in deps.find_links],
        "[dependencies] offline": deps.offline,
    }
    if deps.build:  # only when set: locks of profiles that build nothing stay fresh
        inputs["[dependencies] build"] = sorted(deps.build)
    return inputs


def input_digests(profile: Profile) -> dict[str, str]:
    """A short digest per resolution input, recorded in the lock so that a stale lock can
    say which input changed."""
    return {
        key: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
        for key, value in resolution_inputs(profile).items()
    }


def resolution_sha256(profile: Profile) -> str:
    """The hash of all resolution inputs at once: a lock is fresh when it matches."""
    inputs = resolution_inputs(profile)
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _relative(link: str, directory: Path) -> str:
    try:
        return Path(link).relative_to(directory).as_posix()
    except ValueError:
        return link


def load_fresh_lock(profile: Profile) -> Lock:
    """The profile's lock, refusing a missing or stale one with what to do."""
    lock = read_lock(profile.lock_path, lock_policy(profile))
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
def install_text_for(lock: Lock, profile: Profile) -> str:
    """The lock as the profile's target installs it. On this machine, a wheel the lock names
    by its index URL is taken from a local find-links directory holding the very same file
    (a cache); a remote target has its own disks, and downloads."""
    return lock.install_text(cache=cache_links(profile))


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
        # Its credentials, if any, travel in the environment (uv_index_env), not in a file.
        f"url = {json.dumps(without_credentials(profile.torch.backend_index or ''))}",
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
            uv_index_env(profile),
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
    # The indexes go in uv's environment (uv_index_env), never here.
    for link in links:
        argv += ["--find-links", link]
    return argv + build_options(deps.build)


def build_options(build: tuple[str, ...]) -> list[str]:
    """uv resolves from wheels alone (building an sdist runs its code, even for metadata),
    except the packages `[dependencies] build` names: those come from their sdist."""
    if not build:
        return ["--no-build"]
    options = ["--only-binary", ":all:"]
    for name in build:
        options += ["--no-binary", name]
    return options


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
    if profile.dependencies.build:
        # Package names (validated by the profile): a JSON list of them is a TOML array.
        lines.append(f"build = {json.dumps(sorted(profile.dependencies.build))}")
    lines += ["", "[tool.envlock.inputs]"]
    lines += [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in input_digests(profile).items()]
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


class NeedsBuild(ResolutionFailed):
    """Only an sdist satisfies the profile, and the profile lets nothing be built: the
    profile must change (exit 2)."""

    exit_code = EXIT_USAGE


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
        env = {**(resolver_env(profile) or os.environ), **uv_index_env(profile)}
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
        if proc.returncode != 0 and clean_damaged_cache(profile, proc.stderr):
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
        if proc.returncode != 0:
            reason = redact_text(_clean_uv_error(proc.stderr, tmp))
            failure = NeedsBuild if unbuilt(profile, proc.stderr) else ResolutionFailed
            raise failure(
                f"uv could not resolve {profile.path.name}:\n{reason}",
                reason=reason,
                hint=_resolve_hint(profile, links, proc.stderr),
            )
        here = profile.path.parent.resolve()
        body = record_index_sources(output.read_text(), here, torch_index_asker(profile))
        body = relative_to_profile(body, here)
    refuse_undeclared(profile, body)
    return body.rstrip("\n") + "\n" + envlock_table(profile)


def clean_damaged_cache(profile: Profile, stderr: str) -> bool:
    """When uv failed on its own damaged cache (a crash leaves entries short), clean the
    entries of what it blames and of every package the old lock names; whether to retry."""
    from envlock import ui
    from envlock.agent.core import uv_cache_damage  # the agent's rule, stdlib only

    blamed = uv_cache_damage(stderr)
    if blamed is None:
        return False
    names = set(blamed)
    with contextlib.suppress(EnvlockError):
        names |= set(read_lock(profile.lock_path).packages)
    ui.info(
        f"uv's cache holds damaged entries ({', '.join(blamed) or 'unnamed'}; after a "
        f"crash?): cleaning {len(names)} package(s) and resolving again"
    )
    subprocess.run([uv_path(), "cache", "clean", *sorted(names)], capture_output=True)
    return True


def refuse_undeclared(profile: Profile, body: str) -> None:
    """A lock that must use the profile's own sources names no other local file (only a uv
    configuration of this machine could have added one): refused before it is written."""
    stray = undeclared(profile, body, profile.path.parent)
    if stray:
        raise LockError(
            f"{profile.path.name}: uv took {len(stray)} wheel(s) from outside the profile's "
            f"find-links: {', '.join(stray[:3])}" + (" …" if len(stray) > 3 else ""),
            hint="a remote or offline profile resolves from its own [dependencies] "
            "find-links and indexes: add that directory there if the target has it too, or "
            "remove it from this machine's uv configuration",
        )


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


def unbuilt(profile: Profile, stderr: str) -> str | None:
    """The package uv could take only from an sdist that the profile does not let build."""
    found = re.search(r"[Ww]heels are required for `([^`]+)`", stderr)
    if found and canonicalize_name(found.group(1)) not in profile.dependencies.build:
        return found.group(1)
    return None


def _resolve_hint(profile: Profile, links: list[str], reason: str = "") -> str:
    name = unbuilt(profile, reason)
    if name:
        return (
            f"{name} has no wheel here and envlock builds nothing from source unless told "
            f'(a build runs the package\'s own code): add build = ["{name}"] to '
            "[dependencies], or put a wheel of it in find-links"
        )
    torch = profile.torch
    hint = "check the package names and versions; is the index reachable?"
    if (
        torch
        and torch.backend_index
        and not wheel_in_find_links(links, "torch", torch.pinned_version)
    ):
        hint = (
            f"torch {torch.pinned_version} is taken from {redact_text(torch.backend_index)}: is it "
            "reachable? Otherwise set [torch] index-url to a mirror, or put the wheel in "
            "[dependencies] find-links"
        )
    mine = [link for link in environment_find_links() if link not in links]
    if own_sources_only(profile) and mine:
        # What resolved before may have come from there: say why it is not used now.
        hint += (
            f"; the find-links this machine's pip or uv is configured with ({', '.join(mine)})"
            " are not used for a remote target or an offline profile: list a directory the "
            "target also has in [dependencies] find-links"
        )
    return hint


def write_lock(
    profile: Profile, *, accept: Callable[[Lock], None] | None = None
) -> tuple[Lock, bool]:
    """Resolve and write the lock atomically; returns (lock, changed). `accept` may refuse
    the resolved lock by raising, before anything is written (`lock --portable`)."""
    text = resolve(profile)
    path = profile.lock_path
    lock = parse_lock(path, text, lock_policy(profile))  # never write a lock envlock refuses
    if accept is not None:
        accept(lock)
    old = path.read_text() if path.exists() else None
    if old != text:
        write_atomic(path, text.encode())
    return lock, old != text
