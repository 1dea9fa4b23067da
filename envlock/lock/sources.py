"""Where a lock's wheels come from, so that the lock travels.

A wheel that uv found through a find-links location of this machine (pip's configuration,
`PIP_FIND_LINKS`: anywhere outside the profile's directory) is recorded by the index URL
that serves the very same file (same name, same sha256). At install on this machine the
local file stands in for the download, as a cache; elsewhere the index serves it. A wheel
that no index serves, or serves with other bytes, stays a file URL: the lock is tied to
this machine.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from envlock.base.atomic import write_atomic
from envlock.base.inherited import uv_environment
from envlock.base.untrusted import open_named

# (name, version) -> the index's wheel entries for exactly that release ([] when it has none)
AskIndex = Callable[[str, str], list[dict[str, Any]]]


def record_index_sources(body: str, directory: Path, ask: AskIndex | None = None) -> str:
    """uv's lock text with each wheel of this machine (a file URL outside `directory`)
    replaced by the index's entry for the same file, where an index serves it with the same
    sha256. uv lists the index's copy beside the local one when it consulted that index;
    `ask` is for an index it did not consult (the torch backend's, when find-links already
    held torch). An index copy with other bytes is dropped: the lock pins the bytes used
    here, and uv would install whichever entry comes first."""
    if "file://" not in body:
        return body
    import tomlkit  # here: not every command pays for it at start-up

    doc = tomlkit.parse(body)
    changed = False
    for package in doc.get("packages", []):
        wheels = package.get("wheels")
        if not wheels or not any(_machine_file(w, directory) for w in wheels):
            continue

        def asked(pkg: Any = package) -> list[dict[str, Any]]:
            return ask(str(pkg["name"]), str(pkg["version"])) if ask else []

        chosen = _choose(list(wheels), directory, asked)
        if [id(w) for w in chosen] != [id(w) for w in wheels]:
            package["wheels"] = _wheel_array(chosen)
            changed = True
    return tomlkit.dumps(doc) if changed else body


def _choose(
    wheels: list[Any], directory: Path, ask: Callable[[], list[dict[str, Any]]]
) -> list[Any]:
    local = {id(w): _filename(w["url"]) for w in wheels if _machine_file(w, directory)}
    local_sha = {name: _sha256(w) for w in wheels if (name := local.get(id(w)))}
    served = {_filename(w["url"]): w for w in wheels if _served(w)}
    if not set(local_sha) <= set(served):
        served = {**{_filename(w["url"]): w for w in ask() if _served(w)}, **served}
    chosen: list[Any] = []
    for wheel in wheels:
        name = local.get(id(wheel))
        if name is None:
            if not _other_bytes(wheel, local_sha):
                chosen.append(wheel)
            continue
        twin = served.get(name)
        if twin is None or local_sha[name] is None or _sha256(twin) != local_sha[name]:
            chosen.append(wheel)  # no index serves these bytes: tied to this machine
        elif not any(twin is w for w in [*wheels, *chosen]):
            chosen.append(twin)  # the index's entry, in the local file's place
        # else the index's entry is there already (uv listed it, or another local copy)
    return chosen


def _other_bytes(wheel: Any, local_sha: dict[str, str | None]) -> bool:
    """An index's file named as a local one, with other bytes."""
    if not _served(wheel):
        return False
    sha = local_sha.get(_filename(wheel["url"]))
    return sha is not None and sha != _sha256(wheel)


def _wheel_array(wheels: list[Any]) -> Any:
    import tomlkit

    array = tomlkit.array()
    array.extend(wheels)
    # As uv writes it: one wheel on the line, several one per line.
    return array.multiline(len(wheels) > 1)


def _machine_file(wheel: Any, directory: Path) -> bool:
    url = str(wheel.get("url", ""))
    if not url.startswith("file://"):
        return False
    return not Path(unquote(urlsplit(url).path)).is_relative_to(directory)


def _served(wheel: Any) -> bool:
    url = str(wheel.get("url", ""))
    return bool(url) and not url.startswith("file://")


def _filename(url: str) -> str:
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


def _sha256(wheel: Any) -> str | None:
    hashes = wheel.get("hashes") or {}
    return str(hashes["sha256"]) if "sha256" in hashes else None


def ask_index(
    project: str,
    name: str,
    argv_for: Callable[[Path, Path], list[str]],
    index_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The wheel entries an index serves for `name`, read by uv from the one-requirement
    `project` (a pyproject.toml naming the index): uv's network settings, credentials and
    certificates apply as they did to the resolution. [] when uv cannot say."""
    env = {**uv_environment(), **(index_env or {})}  # the indexes and their credentials
    env.pop("UV_FIND_LINKS", None)  # the index alone
    # A best-effort question: an unreachable index answers at once, not after retries.
    env.setdefault("UV_HTTP_RETRIES", "0")
    import tempfile  # resolving only

    with tempfile.TemporaryDirectory(prefix="envlock-index-") as tmp:
        project_file = Path(tmp) / "pyproject.toml"
        write_atomic(project_file, project.encode())
        output = Path(tmp) / "pylock.index.toml"
        argv = argv_for(project_file, output)
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
        if proc.returncode != 0 or not output.exists():
            return []
        import tomlkit

        # Parsed as uv wrote it: an entry taken into the lock keeps uv's layout.
        # own: uv's output in envlock's private temp dir
        answer = tomlkit.parse(output.read_text())
    wanted = canonicalize_name(name)
    for package in answer.get("packages", []):
        if canonicalize_name(package.get("name", "")) == wanted:
            return [w for w in package.get("wheels", []) if _served(w)]
    return []


# -- at install ---------------------------------------------------------------------------
def with_local_copies(text: str, links: Sequence[str]) -> str:
    """The lock as this machine installs it: a wheel named by an index URL whose very file
    (same name, same sha256) lies in one of the local find-links `links` is installed from
    that file, a cache the lock does not name (uv itself reads find-links only when it
    resolves, never for a lock's URLs)."""
    local = _local_wheels(links)
    if not local or not any(name in text for name in local):
        return text
    import tomlkit

    doc = tomlkit.parse(text)
    changed = False
    for package in doc.get("packages", []):
        for wheel in package.get("wheels", []):
            if not _served(wheel):
                continue
            copy = _same_file(local.get(_filename(wheel["url"]), ()), _sha256(wheel))
            if copy is not None:
                del wheel["url"]
                wheel["path"] = str(copy)
                changed = True
    return tomlkit.dumps(doc) if changed else text


def _local_wheels(links: Iterable[str]) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for link in links:
        directory = Path(link.removeprefix("file://"))
        if not directory.is_dir():  # a URL, or gone
            continue
        for wheel in sorted(directory.glob("*.whl")):
            found.setdefault(wheel.name, []).append(wheel.resolve())
    return found


def _same_file(candidates: Iterable[Path], sha256: str | None) -> Path | None:
    if not sha256:
        return None
    for path in candidates:
        digest = hashlib.sha256()
        with open_named(path, "wheel") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() == sha256:
            return path
    return None
