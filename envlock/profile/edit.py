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
from envlock.profile.read import TORCH_FAMILY


@dataclass(frozen=True)
class Edit:
    """A profile's new text and what the edit did to each list, in the words shown: an
    added requirement, "old → new" for a replaced one, or the entry removed."""

    text: str
    dependencies: tuple[str, ...] = ()
    torch_packages: tuple[str, ...] = ()  # the same in [torch] packages
    removing: bool = False
    kept: tuple[str, ...] = ()  # "tqdm: already listed as tqdm>=4.66": asked, not changed

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
    kept: list[str] = []
    for requirement in requirements:
        name = canonicalize_name(parse_requirement(requirement).name)
        if name == "torch":
            raise UsageError(
                "the torch pin is never moved by `envlock add`",
                hint="change [torch] version in the profile, then `envlock lock` and "
                "`envlock apply`",
            )
        section = "torch" if name in TORCH_FAMILY else "dependencies"
        listed = put(packages_array(doc, section), name, requirement)
        if listed is None:
            added[section].append(requirement)
        elif listed.kept:
            kept.append(f"{requirement}: already listed as {listed.before}")
        else:
            added[section].append(f"{listed.before} → {requirement}")
    return Edit(
        doc.as_string(), tuple(added["dependencies"]), tuple(added["torch"]), kept=tuple(kept)
    )


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
        found = ((s, drop(doc, s, name)) for s in ("dependencies", "torch"))
        section, entry = next(((s, e) for s, e in found if e is not None), (None, None))
        if section is None or entry is None:
            raise UsageError(
                f"{raw} is not in [dependencies] packages nor [torch] packages",
                hint="`envlock remove` takes the names the profile lists; a package that "
                "comes in as another's dependency goes when that one goes",
            )
        removed[section].append(entry)
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


@dataclass(frozen=True)
class Listed:
    """The entry a requirement met in the list, and whether it stays as it was."""

    before: str
    kept: bool


def put(array: Array, name: str, requirement: str) -> Listed | None:
    """Append (None), or meet the entry naming the same package: a bare name or the same
    requirement keeps it (a constraint is never dropped silently); any other requirement
    replaces it in place (its comment stays)."""
    for index, entry in enumerate(array):
        if entry_name(entry) == name:
            before = str(entry)
            if is_bare(requirement) or same_requirement(before, requirement):
                return Listed(before, kept=True)
            array[index] = requirement
            return Listed(before, kept=False)
    array.append(requirement)
    return None


def is_bare(requirement: str) -> bool:
    """Only a name: no version, extras, marker or URL asked for."""
    parsed = Requirement(requirement)
    return not (parsed.specifier or parsed.extras or parsed.marker or parsed.url)


def same_requirement(a: str, b: str) -> bool:
    """Equal once spelling is normalised ("tqdm >= 4.66" is "tqdm>=4.66")."""
    try:
        return str(Requirement(a)) == str(Requirement(b))
    except InvalidRequirement:
        return False


def drop(doc: tomlkit.TOMLDocument, section: str, name: str) -> str | None:
    """Delete the entry of this name from the table's list; the entry as it was, or None."""
    table = doc.get(section)
    array = table.get("packages") if isinstance(table, Table | dict) else None
    if not isinstance(array, Array):
        return None
    for index, entry in enumerate(array):
        if entry_name(entry) == name:
            del array[index]
            return str(entry)
    return None


def entry_name(entry: object) -> str | None:
    try:
        return canonicalize_name(Requirement(str(entry)).name)
    except InvalidRequirement:
        return None  # the profile's validation reports it
