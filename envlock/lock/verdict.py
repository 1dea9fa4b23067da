"""A lock's verdict, kept by content hash: the validator runs once per distinct lock.

Validating a lock (lock_schema.py) parses its TOML and checks every field, wheel file names
included, with `packaging`'s tag code: most of what `check`, `run` and `rollback` import
beyond their own work. The verdict is a pure function of the text, the policy it was read
under, and the versions of envlock and `packaging`, so it is kept under exactly those:
`~/.cache/envlock/locks/<sha256>.json` holds, for a lock the validator accepted, what a
`Lock` is made of (its packages, its `[tool.envlock]` table, what it may build) and the
text's sha256. Only accepted locks are kept: a refusal is always worded by the validator.
TOML's dates and times (a wheel's `upload-time`) travel as `{"toml-datetime": [kind, iso]}`
and come back as the very objects the TOML parser made; a verdict that would not come back
equal is not kept.

The entry is data written by an earlier envlock of this user, kept and read as usercache.py
says (this user's alone, through the one gate), and used only when its shape is exactly what
was written for this text; anything else is a miss, and the validator runs.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

import packaging  # the package only (its version): the validator loads on a miss

from envlock import __version__
from envlock.base.usercache import read_entry, write_entry
from envlock.lock.policy import LockPolicy

SCHEMA = 1
KIND = "locks"


class Verdict:
    """What the validator made of a lock: its packages' fields, `[tool.envlock]`, builds."""

    def __init__(
        self, packages: list[dict[str, Any]], meta: dict[str, Any], build: frozenset[str]
    ) -> None:
        self.packages = packages
        self.meta = meta
        self.build = build


def entry_key(text: str, policy: LockPolicy) -> list[object]:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return [SCHEMA, __version__, packaging.__version__, policy.key(), digest]


def cached_verdict(text: str, policy: LockPolicy) -> Verdict | None:
    """The verdict on exactly this text under this policy, or None (a miss)."""
    return verdict_of(read_entry(KIND, entry_key(text, policy)), text)


def verdict_of(data: object, text: str) -> Verdict | None:
    """The entry's verdict when it is exactly the shape written for `text`, else None."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    if data.get("sha256") != hashlib.sha256(text.encode()).hexdigest():
        return None
    packages, meta, build = data.get("packages"), data.get("meta"), data.get("build")
    if not isinstance(packages, list) or not isinstance(meta, dict):
        return None
    if not isinstance(build, list) or not all(isinstance(name, str) for name in build):
        return None
    try:
        packages, meta = decoded(packages), decoded(meta)
    except (ValueError, TypeError):
        return None
    for package in packages:
        if not isinstance(package, dict) or not package_shape(package):
            return None
    return Verdict(packages, meta, frozenset(build))


def package_shape(package: dict[str, Any]) -> bool:
    if set(package) != {"name", "version", "wheels", "sdist"}:
        return False
    if not isinstance(package["name"], str) or not isinstance(package["version"], str):
        return False
    wheels, sdist = package["wheels"], package["sdist"]
    if not isinstance(wheels, list) or not all(isinstance(w, dict) for w in wheels):
        return False
    return sdist is None or isinstance(sdist, dict)


def remember_verdict(text: str, policy: LockPolicy, verdict: Verdict) -> None:
    """Keep the validator's verdict on `text` under `policy` for next time (when it comes
    back from JSON exactly as it is)."""
    data = {
        "schema": SCHEMA,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "packages": encoded(verdict.packages),
        "meta": encoded(verdict.meta),
        "build": sorted(verdict.build),
    }
    try:
        back = json.loads(json.dumps(data))
        same = (decoded(back["packages"]), decoded(back["meta"])) == (
            verdict.packages,
            verdict.meta,
        )
    except (TypeError, ValueError):
        return
    if not same:
        return
    write_entry(KIND, entry_key(text, policy), data)


TAG = "toml-datetime"
# Checked in this order: a datetime is also a date.
KINDS: dict[str, Any] = {
    "datetime": datetime.datetime,
    "date": datetime.date,
    "time": datetime.time,
}


def encoded(value: Any) -> Any:
    """TOML data as JSON data: dates and times tagged."""
    if isinstance(value, dict):
        return {key: encoded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [encoded(item) for item in value]
    for kind, cls in KINDS.items():
        if isinstance(value, cls):
            return {TAG: [kind, value.isoformat()]}
    return value


def decoded(value: Any) -> Any:
    """`encoded`'s inverse (a malformed tag: ValueError)."""
    if isinstance(value, list):
        return [decoded(item) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {TAG}:
        tagged = value[TAG]
        if not (isinstance(tagged, list) and len(tagged) == 2 and tagged[0] in KINDS):
            raise ValueError(f"not a tagged date or time: {tagged!r}")
        if not isinstance(tagged[1], str):
            raise ValueError(f"not a tagged date or time: {tagged!r}")
        return KINDS[tagged[0]].fromisoformat(tagged[1])
    return {key: decoded(item) for key, item in value.items()}
