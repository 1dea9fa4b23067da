"""Declared shapes for data from elsewhere (snapshots, locks), checked field by field.

Small composable checks: each takes a value and where it was found, and raises `Invalid`
naming that place, what was expected and what was found
(`lock.text: packages[3].name: expected a value, found nothing (missing)`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Check = Callable[[Any, str], None]


class Invalid(Exception):
    """A field that does not have the declared shape: where, what was expected, what was found."""

    def __init__(
        self,
        where: str,
        expected: str,
        value: Any = None,
        *,
        found: str = "",
        hint: str | None = None,
    ) -> None:
        prefix = f"{where.rstrip(':')}: " if where else ""
        super().__init__(f"{prefix}expected {expected}, found {found or shown(value)}")
        self.hint = hint


def join(where: str, name: str) -> str:
    """`lock.text`, `packages[0].name`, `[tool.envlock] python-version`."""
    if not where:
        return name
    if where.endswith(":"):
        return f"{where} {name}"
    if where.endswith("]") and where.rsplit(" ", 1)[-1].startswith("["):
        return f"{where} {name}"
    return f"{where}.{name}"


def shown(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the checks, small and composable -------------------------------------------------------
def kind(types: type | tuple[type, ...], expected: str) -> Check:
    allowed = types if isinstance(types, tuple) else (types,)

    def check(value: Any, where: str) -> None:
        # JSON's true is no integer, whatever Python's bool says.
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise Invalid(where, expected, value)

    return check


STR = kind(str, "a string")
# Numbers read from files are bounded: no count, size, step or metric real data holds comes
# near 2**63, and a bigger one overflows a float (10**309) or a C integer where it is used.
MAX_INT = 2**63


def bounded(types: type | tuple[type, ...], expected: str) -> Check:
    base = kind(types, expected)

    def check(value: Any, where: str) -> None:
        base(value, where)
        if isinstance(value, int) and abs(value) >= MAX_INT:
            digits = int(value.bit_length() * 0.30103) + 1  # never printed: it may be huge
            raise Invalid(
                where, f"{expected} below 2**63", found=f"a number of about {digits:,} digits"
            )

    return check


INT = bounded(int, "an integer")
BOOL = kind(bool, "true or false")
NUMBER = bounded((int, float), "a number")


def matching(pattern: re.Pattern[str], expected: str) -> Check:
    def check(value: Any, where: str) -> None:
        STR(value, where)
        if not pattern.fullmatch(value):
            raise Invalid(where, expected, value)

    return check


def nullable(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if value is not None:
            inner(value, where)

    return check


def obj(fields: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """A JSON object (TOML table) whose listed fields have their shapes; others are ignored
    (nothing reads them), so a newer envlock's extra fields stay readable."""

    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Invalid(where, "an object", value)
        for name in required:
            if name not in value:
                raise Invalid(join(where, name), "a value", found="nothing (missing)")
        for name, inner in fields.items():
            if name in value:
                inner(value[name], join(where, name))

    return check


def mapping(keys: Check, values: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Invalid(where, "an object", value)
        for key, item in value.items():
            keys(key, f"{where} key {shown(key)}")
            values(item, join(where, str(key)))

    return check


def items(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise Invalid(where, "a list", value)
        for index, item in enumerate(value):
            inner(item, f"{where}[{index}]")

    return check


def json_data(max_depth: int) -> Check:
    """Any JSON value (a run's config), nested no deeper than `max_depth`."""

    def check(value: Any, where: str, depth: int = 0) -> None:
        if depth > max_depth:
            raise Invalid(where, f"data nested at most {max_depth} deep", found="deeper")
        if isinstance(value, dict):
            for key, item in value.items():
                check(item, join(where, str(key)), depth + 1)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                check(item, f"{where}[{index}]", depth + 1)

    return check


# -- names, hashes, paths ---------------------------------------------------------------------
# A distribution's name as PEP 508 allows it (compared after PEP 503 normalisation).
PACKAGE_NAME_RE = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
PACKAGE_NAME = matching(PACKAGE_NAME_RE, "a package name")
SHA256 = matching(re.compile(r"[0-9a-f]{64}"), "a sha256 (64 hex digits)")


def relative_path(value: Any, where: str) -> None:
    """A script's path below the scripts directory: never absolute, never `..`."""
    STR(value, where)
    parts = value.split("/")
    if value.startswith("/") or "\0" in value or "\\" in value or "" in parts or ".." in parts:
        raise Invalid(where, "a relative path inside the scripts directory", value)


# -- the documents envlock prints for scripts ---------------------------------------------------
# Every `--json` document carries "schema": its kind's number here, raised when a field of
# that kind changes meaning (a field added is no change). The one table: a script checks one
# number per kind, and tests/cli/test_json_contract.py walks every command against it.
DOCUMENTS: dict[str, int] = {
    "error": 1,  # any command's failure under --json: {schema, error, hint, exit}
    "init": 1,
    # 2 (init-from, lock, lock-check): the lock file's path is "lock_file", no longer "lock"
    "init-from": 2,
    "lock": 2,
    "lock-check": 2,
    "plan": 1,
    "apply": 1,
    # 2: the profile's lock id is "lock_id", no longer "lock" (the hold's too)
    "check": 2,
    "rollback": 1,
    "rollback-container": 1,  # "container" added: no change of meaning
    # 2: a row's lock id is "lock_id", no longer "lock"
    "generations": 2,
    # 2: a snapshot's lock id is "lock_id", no longer "lock"; an unknown generation, lock id
    # or time is null, no longer "none"/"unknown …"/""
    "generations-container": 2,
    "gc": 1,
    "snapshot": 1,
    "diff": 1,
    "inspect": 1,
    "data": 1,
    "cache-status": 1,
    "cache-save": 1,
    "cache-restore": 1,
    "add": 1,
    "remove": 1,
    # 2: a member's "generation" is the generation's name ("3-<lock id>"), as in every
    # single-target document, no longer its number.
    # 3: the summary's lock id is "lock_id" (was "lock") and a member's generation's lock id
    # "generation_lock_id" (was "generation_lock"): one name per concept
    # (a Docker fleet's member has "vmid": null, its container's "name" on its engine, "node";
    # a Proxmox fleet's document is unchanged)
    "fleet": 3,
    "bisect": 1,
    # the snapshot file written into a checkpoint directory (envlock-snapshot.json)
    "snapshot-file": 1,
}


def document(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` as a document of `kind`: "schema" first, the kind's number from the table."""
    return {"schema": DOCUMENTS[kind], **{k: v for k, v in body.items() if k != "schema"}}
