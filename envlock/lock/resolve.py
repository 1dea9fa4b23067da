"""Resolving a profile into its lock: uv's compile with the torch index source, the
find-links and index rules, and the one writer of `pylock.<name>.toml`.

Apart from lock.py (reading and staleness) so that the commands that only read a lock
(check, run) never load the resolver, its index and find-links rules or `packaging`'s
requirement parser.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envlock.base.atomic import write_atomic
from envlock.base.inherited import uv_environment
from envlock.base.pythons import resolver_python
from envlock.base.secrets import redact_text
from envlock.base.untrusted import read_named
from envlock.base.uvbin import uv_path
from envlock.errors import EXIT_USAGE, EnvlockError, LockError, OperationError
from envlock.lock.indexes import uv_index_env, without_credentials
from envlock.lock.links import (
    cache_links,
    environment_find_links,
    find_links_for,
    own_sources_only,
    resolver_env,
    undeclared,
    wheel_in_find_links,
)
from envlock.lock.read import (
    LOCK_FORMAT,
    Lock,
    input_digests,
    lock_policy,
    parse_lock,
    read_lock,
    resolution_sha256,
)
from envlock.lock.sources import AskIndex, ask_index, record_index_sources
from envlock.profile.read import TORCH_FAMILY, Profile


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
    argv += resolver_python()  # nothing found on PATH or fetched: envlock's own
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
        env = {**uv_environment(resolver_env(profile)), **uv_index_env(profile)}
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
        # own: uv's output in envlock's private temp dir
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
    subprocess.run(
        [uv_path(), "cache", "clean", *sorted(names)], capture_output=True, env=uv_environment()
    )
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
    old = read_named(path, "lock").decode(errors="replace") if path.exists() else None
    if old != text:
        write_atomic(path, text.encode())
    return lock, old != text
