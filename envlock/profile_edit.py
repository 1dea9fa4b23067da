"""Edits of a profile's requirement lists that keep everything else byte for byte.

`envlock add` and `remove` change `[dependencies] packages` (and `[torch] packages` for the
packages PyTorch publishes per backend) through tomlkit, so the user's comments, key order
and layout survive; only the lines of the requirements touched change.
"""

from __future__ import annotations

from dataclasses import dataclass

import tomlkit
import tomlkit.exceptions
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from tomlkit.items import Array, Table

from envlock.errors import UsageError
from envlock.profile import TORCH_FAMILY


@dataclass(frozen=True)
class Edit:
    """A profile's new text and what the edit did to each list."""

    text: str
    dependencies: tuple[str, ...] = ()  # requirements added or replaced, or names removed
    torch_packages: tuple[str, ...] = ()  # the same in [torch] packages
    removing: bool = False

    @property
    def touches_torch(self) -> bool:
        return bool(self.torch_packages)


def parse_requirement(text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise UsageError(
            f"not a requirement: {text!r} ({exc})", hint='write it as pip would: "sglang>=0.5"'
        ) from None


def add_requirements(text: str, requirements: list[str]) -> Edit:
    """`text` with each requirement added, or replacing the entry of the same name."""
    doc = parse(text)
    added: dict[str, list[str]] = {"dependencies": [], "torch": []}
    for requirement in requirements:
        name = canonicalize_name(parse_requirement(requirement).name)
        if name == "torch":
            raise UsageError(
                "the torch pin is never moved by `envlock add`",
                hint="change [torch] version in the profile, then `envlock lock` and "
                "`envlock apply`",
            )
        section = "torch" if name in TORCH_FAMILY else "dependencies"
        if put(packages_array(doc, section), name, requirement):
            added[section].append(requirement)
    return Edit(doc.as_string(), tuple(added["dependencies"]), tuple(added["torch"]))


def remove_requirements(text: str, names: list[str]) -> Edit:
    """`text` without the entries of these names (torch itself is refused)."""
    doc = parse(text)
    removed: dict[str, list[str]] = {"dependencies": [], "torch": []}
    for raw in names:
        name = canonicalize_name(raw)
        if name == "torch":
            raise UsageError(
                "torch cannot be removed: the profile's [torch] table pins it",
                hint="to drop torch, delete the [torch] table by hand and run `envlock lock`",
            )
        section = next((s for s in ("dependencies", "torch") if drop(doc, s, name)), None)
        if section is None:
            raise UsageError(
                f"{raw} is not in [dependencies] packages nor [torch] packages",
                hint="`envlock remove` takes the names the profile lists; a package that "
                "comes in as another's dependency goes when that one goes",
            )
        removed[section].append(name)
    return Edit(
        doc.as_string(), tuple(removed["dependencies"]), tuple(removed["torch"]), removing=True
    )


# -- tomlkit ------------------------------------------------------------------------------
def parse(text: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise UsageError(f"the profile is not valid TOML: {exc}") from None


def packages_array(doc: tomlkit.TOMLDocument, section: str) -> Array:
    """The table's `packages` array, created (with the table) when missing."""
    if section not in doc:
        doc.add(section, tomlkit.table())
    table = doc[section]
    if not isinstance(table, Table | dict):
        raise UsageError(f"[{section}] is not a table")
    if "packages" not in table:
        table["packages"] = tomlkit.array()
    array = table["packages"]
    if not isinstance(array, Array):
        raise UsageError(f"[{section}] packages is not a list")
    return array


def put(array: Array, name: str, requirement: str) -> bool:
    """Append, or replace the entry naming the same package in place (its comment stays);
    False when that exact requirement is listed already."""
    for index, entry in enumerate(array):
        if entry_name(entry) == name:
            if str(entry) == requirement:
                return False
            array[index] = requirement
            return True
    array.append(requirement)
    return True


def drop(doc: tomlkit.TOMLDocument, section: str, name: str) -> bool:
    table = doc.get(section)
    array = table.get("packages") if isinstance(table, Table | dict) else None
    if not isinstance(array, Array):
        return False
    for index, entry in enumerate(array):
        if entry_name(entry) == name:
            del array[index]
            return True
    return False


def entry_name(entry: object) -> str | None:
    try:
        return canonicalize_name(Requirement(str(entry)).name)
    except InvalidRequirement:
        return None  # the profile's validation reports it
