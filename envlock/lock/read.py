"""Locks: a profile resolved by uv into a PEP 751 `pylock.<name>.toml` plus `[tool.envlock]`.

Torch-family packages are pinned with the backend's local label and taken only from the
backend's index (through an explicit uv index source), unless a find-links location already
holds the pinned wheel (air-gapped clusters, this project's test wheelhouse), in which case
the label pin alone guarantees the right build.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock.base.untrusted import NamedRefused, read_named
from envlock.errors import LockError
from envlock.lock.policy import STRICT, LockPolicy, profile_policy
from envlock.lock.verdict import Verdict, cached_verdict, remember_verdict
from envlock.profile.read import Profile

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
        if not cache:
            return text
        # Resolution's module: loaded only where an install happens (check and run never).
        from envlock.lock.sources import with_local_copies

        return with_local_copies(text, cache)

    def versions(self) -> dict[str, str]:
        return {name: pkg.version for name, pkg in self.packages.items()}


def read_lock(path: Path, policy: LockPolicy = STRICT) -> Lock:
    """Read and validate a lock file (see lock_schema: the one validator)."""
    try:
        text = read_named(path, "lock").decode()  # through the gate, then validated in full
    except FileNotFoundError:
        raise LockError(f"{path}: no lock", hint="run `envlock lock PROFILE` first") from None
    except NamedRefused as exc:
        raise LockError(f"{path}: cannot read the lock: {exc.why}", hint=exc.hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"{path}: cannot read the lock: {exc}") from None
    return parse_lock(path, text, policy)


def parse_lock(path: Path, text: str, policy: LockPolicy = STRICT, *, where: str = "") -> Lock:
    """The one way to a `Lock`: the text validated field by field under `policy` (what it
    may build, where its wheels may come from), refused whole otherwise (LockError, exit 2,
    naming `path`, or `path` and `where` for a lock inside a snapshot). The validator's
    verdict on these very bytes under this policy is kept (lock_cache.py): it runs once."""
    verdict = cached_verdict(text, policy)
    if verdict is None:
        verdict = validated(path, text, policy, where)
        remember_verdict(text, policy, verdict)
    packages: dict[str, LockedPackage] = {}
    for entry in verdict.packages:
        packages[entry["name"]] = LockedPackage(
            name=entry["name"],
            version=entry["version"],
            wheels=tuple(entry["wheels"]),
            sdist=entry["sdist"],
        )
    return Lock(
        path=path,
        text=text,
        packages=packages,
        meta=verdict.meta,
        build=verdict.build,
        policy=policy,
    )


def validated(path: Path, text: str, policy: LockPolicy, where: str) -> Verdict:
    """lock_schema's verdict: the package fields a `Lock` keeps, names canonical."""
    from packaging.utils import canonicalize_name

    from envlock.lock.schema import lock_data

    data, build = lock_data(text, str(path), policy, where)
    packages = [
        {
            "name": canonicalize_name(entry["name"]),
            "version": entry["version"],
            "wheels": list(entry.get("wheels", [])),
            "sdist": entry.get("sdist"),
        }
        for entry in data.get("packages", [])
    ]
    return Verdict(packages, data["tool"]["envlock"], build)


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
