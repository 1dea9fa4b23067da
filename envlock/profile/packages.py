"""A profile's packages: the [torch] table (version, backend, the torch family) and the
[dependencies] table (requirements, indexes, find-links, offline, sdist builds), validated."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from envlock.base.tomlread import Table, describe, shown
from envlock.profile.fields import (
    BACKEND_RE,
    RequirementNames,
    backend_hint,
    check_url,
    padded_release,
    requirement_of,
)
from envlock.profile.model import Dependencies, TorchSpec
from envlock.schema import PACKAGE_NAME_RE

if TYPE_CHECKING:
    from packaging.requirements import Requirement

LocalPath = Callable[[str], Path]  # a controller-side path, relative to the profile


# -- [torch] ----------------------------------------------------------------------------
def torch_spec(t: Table) -> TorchSpec:
    """[torch]: a three-part version, its backend, and the torch-family packages."""
    version = t.string("version")
    try:
        parsed = Version(version)
    except InvalidVersion:
        t.fail("version", f'expected a torch version such as "2.11.0", found {shown(version)}')
    if len(parsed.release) < 3:
        # torch releases always have three parts; uv would look for "2.13" on the network.
        t.fail(
            "version",
            f'expected a torch version such as "2.11.0", found {shown(version)}',
            hint=f'did you mean "{padded_release(version, parsed)}"?',
        )
    backend = t.raw(
        "backend",
        required_because="a torch version needs a backend: "
        "cpu, cu126, cu128, cu130, rocm6.4, xpu or pypi",
    )
    if not isinstance(backend, str):
        t.fail("backend", f"expected a string, found {describe(backend)}")
    if not BACKEND_RE.fullmatch(backend):
        t.fail(
            "backend",
            f"expected cpu, cuXYZ (e.g. cu128), rocmX.Y, xpu or pypi, found {shown(backend)}",
            hint=backend_hint(backend),
        )
    if parsed.local and parsed.local != backend:
        t.fail(
            "version",
            f'local label "+{parsed.local}" contradicts backend "{backend}"',
            hint=f'write version = "{parsed.public}" and let the backend set the label',
        )
    index_url = t.string("index-url", None)
    if index_url is not None:
        check_url(t, "index-url", index_url)
    packages = t.texts("packages", [])
    seen: dict[str, str] = {"torch": "[torch] version"}
    names = RequirementNames(t, packages)
    for index, text in enumerate(packages):
        written, name = names.at(index)
        if name == "torch":
            t.fail(
                f"packages[{index}]",
                "torch itself is pinned by [torch] version",
                hint="remove it from [torch] packages",
            )
        if name in seen:
            t.fail(f"packages[{index}]", f'duplicate package "{written}"')
        seen[name] = text
    names.remember()
    t.finish()
    return TorchSpec(
        version=version, backend=backend, index_url=index_url, packages=tuple(packages)
    )


# -- [dependencies] ---------------------------------------------------------------------
def dependencies_of(t: Table, torch: TorchSpec | None, local_path: LocalPath) -> Dependencies:
    """[dependencies]: requirements (torch and its family left to [torch]), indexes,
    find-links (relative ones taken by `local_path`), offline, build."""
    packages = t.texts("packages", [])
    torch_names = (
        {name for _, name in RequirementNames(t, list(torch.packages)).all()} if torch else set()
    )
    seen: set[str] = set()
    names = RequirementNames(t, packages)
    for index, text in enumerate(packages):
        key = f"packages[{index}]"
        written, name = names.at(index)
        if name in seen:
            t.fail(key, f'duplicate package "{written}"', hint="list each package once")
        seen.add(name)
        if torch is not None and name == "torch":
            torch_conflict(t, key, requirement_of(t, key, text), torch)
        if name in torch_names:
            t.fail(
                key,
                f'"{written}" is already in [torch] packages',
                hint="keep torch-family packages in [torch] packages only",
            )
    names.remember()
    index_url = t.string("index-url", None)
    if index_url is not None:
        check_url(t, "index-url", index_url)
    extras = t.strings("extra-index-urls", [])
    for index, url in enumerate(extras):
        check_url(t, f"extra-index-urls[{index}]", url)
    links = [find_link(link, local_path) for link in t.texts("find-links", [])]
    build = read_build(t)
    offline = t.boolean("offline", False)
    if offline and not links:
        t.fail(
            "offline",
            "offline = true needs at least one entry in find-links",
            hint='add `find-links = ["wheelhouse"]`',
        )
    t.finish()
    return Dependencies(
        packages=tuple(packages),
        index_url=index_url,
        extra_index_urls=tuple(extras),
        find_links=tuple(links),
        offline=offline,
        build=build,
    )


def read_build(t: Table) -> tuple[str, ...]:
    """`build = ["name", ...]`: bare package names, each once (building runs its code)."""
    names = t.strings("build", [])
    if not names:
        return ()
    from packaging.utils import canonicalize_name  # (its tags module): when names are given

    found: list[str] = []
    for index, name in enumerate(names):
        key = f"build[{index}]"
        if not PACKAGE_NAME_RE.fullmatch(name):
            t.fail(
                key,
                f"expected a package name, found {shown(name)}",
                hint='a bare name such as "flash-attn": versions belong in packages',
            )
        if canonicalize_name(name) in found:
            t.fail(key, f'duplicate package "{name}"', hint="list each package once")
        found.append(canonicalize_name(name))
    return tuple(found)


def torch_conflict(t: Table, key: str, req: Requirement, torch: TorchSpec) -> None:
    pin = Version(torch.pinned_version)
    if req.specifier and not req.specifier.contains(pin, prereleases=True):
        t.fail(
            key,
            f'"{req}" conflicts with the torch pin {pin} from [torch]',
            hint="remove it; [torch] version decides torch",
        )
    t.fail(key, "torch is pinned by [torch] version", hint="remove it from [dependencies]")


def find_link(link: str, local_path: LocalPath) -> str:
    if re.match(r"^[a-z]+://", link):
        return link
    return str(local_path(link))
