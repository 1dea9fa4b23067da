"""What a snapshot must look like before anything reads it, field by field.

Snapshots travel with checkpoints, and checkpoints come from strangers: a snapshot is data,
validated like a profile. Every field a consumer reads (diff, apply --from-snapshot) has a
declared type here, and the embedded lock passes the one lock validator (lock_schema), then
where each of its wheels comes from, since `apply --from-snapshot` hands them to uv. A
failure names the field: `snapshot.json: lock.text: expected a string, found 3`.
"""

from __future__ import annotations

import math
import os
from typing import Any
from urllib.parse import unquote, urlsplit

from envlock.errors import UsageError
from envlock.lock.policy import SHOWN
from envlock.lock.schema import artifacts_of, lock_data
from envlock.runs.snapshot_doc import DATA_NAME, MAX_METRICS, METRIC_NAME
from envlock.schema import (
    BOOL,
    INT,
    NUMBER,
    PACKAGE_NAME,
    SHA256,
    STR,
    Check,
    Invalid,
    items,
    json_data,
    mapping,
    matching,
    nullable,
    obj,
    relative_path,
    shown,
)


# -- what the run read and measured -----------------------------------------------------------
def finite(value: Any, where: str) -> None:
    """A metric: a number, not NaN or ±Infinity (which Python's JSON reader accepts)."""
    NUMBER(value, where)
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(where, "a finite number", value)


def at_most(count: int, inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if isinstance(value, dict) and len(value) > count:
            raise Invalid(where, f"at most {count} entries", found=f"{len(value):,}")
        inner(value, where)

    return check


DATASET = obj(
    {
        "path": STR,
        "missing": BOOL,
        "incomplete": BOOL,
        "files": INT,
        "bytes": INT,
        "newest_mtime": NUMBER,
        "listing_sha256": SHA256,
        "sample_sha256": SHA256,
        "content_sha256": SHA256,
        "unreadable": INT,
        "unreadable_named": items(STR),
        "seconds": NUMBER,
    },
    ("path", "missing"),
)
DATASETS = at_most(MAX_METRICS, mapping(matching(DATA_NAME, "a dataset name"), DATASET))
METRICS = at_most(MAX_METRICS, mapping(matching(METRIC_NAME, "a metric name"), finite))

# -- the snapshot -----------------------------------------------------------------------------
OPT_STR = nullable(STR)
SNAPSHOT = obj(
    {
        "schema": INT,
        "created": OPT_STR,
        "envlock": OPT_STR,
        "profile": obj({"name": STR, "path": OPT_STR, "sha256": OPT_STR}, ("name",)),
        "lock": obj({"sha256": OPT_STR, "text": STR}, ("text",)),
        "generation": OPT_STR,
        "verified": BOOL,  # false: written outside `envlock run`, the environment unchecked
        "python": OPT_STR,
        "platform": nullable(obj({"machine": OPT_STR, "libc": OPT_STR})),
        "packages": nullable(mapping(PACKAGE_NAME, STR)),
        "torch": nullable(
            obj(
                {
                    "version": STR,
                    "local": OPT_STR,
                    "cuda": OPT_STR,
                    "hip": OPT_STR,
                    "git_version": OPT_STR,
                    "cudnn": OPT_STR,
                    "cuda_requires": items(STR),
                },
                ("version",),
            )
        ),
        "hardware": nullable(
            obj({"driver": OPT_STR, "gpus": items(obj({"name": OPT_STR, "capability": OPT_STR}))})
        ),
        "scripts": nullable(
            obj({"dest": OPT_STR, "sha256": mapping(relative_path, nullable(SHA256))})
        ),
        "env": nullable(mapping(STR, STR)),
        "cache": nullable(
            obj(
                {
                    "dir": STR,
                    "fingerprint": obj({"id": STR, "parts": json_data(8)}),
                    "exists": BOOL,
                    "files": INT,
                    "bytes": INT,
                    "last_used": nullable(NUMBER),
                }
            )
        ),
        "host": nullable(obj({"hostname": OPT_STR, "container": OPT_STR, "target": OPT_STR})),
        "command": nullable(items(STR)),
        "git": nullable(obj({"commit": STR, "dirty": BOOL})),
        "config": json_data(64),
        "datasets": nullable(DATASETS),
        "metrics": nullable(METRICS),
        "process": nullable(
            obj(
                {
                    "argv": items(STR),
                    "rank": INT,
                    "local_rank": nullable(INT),
                    "world_size": INT,
                }
            )
        ),
    },
    ("schema", "profile", "lock"),
)


def lock_sources(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, url or path) of every artifact of a checked lock."""
    return [
        (at, artifact.get("url") or artifact["path"])
        for index, package in enumerate(data.get("packages", []))
        for at, artifact in artifacts_of(package, f"lock.text: packages[{index}]")
    ]


# -- entry points ------------------------------------------------------------------------------
def validate_snapshot(data: Any, origin: str) -> dict[str, Any]:
    """The snapshot document, checked; UsageError naming the file and the field otherwise."""
    try:
        SNAPSHOT(data, "")
    except Invalid as exc:
        raise UsageError(f"{origin}: {exc}") from None
    lock_data(data["lock"]["text"], origin, SHOWN, "lock.text")
    return data


# -- where a snapshot's wheels may come from, on this machine ------------------------------------
def local_path(source: str) -> str | None:
    """The local path a file:// URL or a path names (None for https://, or a remote host)."""
    if source.startswith("https://"):
        return None
    if source.startswith("file://"):
        parts = urlsplit(source)
        if parts.netloc not in ("", "localhost"):
            return ""
        return os.path.normpath(unquote(parts.path))
    return os.path.normpath(source)


def check_sources(data: dict[str, Any], find_links: list[str], origin: str) -> None:
    """Every wheel comes from https:// or from inside one of the profile's local find-links:
    a stranger's snapshot names no other file on this machine to install."""
    roots = [p for p in (local_path(link) for link in find_links) if p]
    for where, source in lock_sources(data):
        path = local_path(source)
        if path is None or any(path.startswith(root.rstrip("/") + "/") for root in roots):
            continue
        raise UsageError(
            f"{origin}: {where}: {shown(source)} is neither https:// nor inside the profile's "
            f"find-links ({', '.join(roots) or 'none'})",
            hint="a snapshot's wheels must come from an index over https or from the "
            "profile's [dependencies] find-links",
        )
