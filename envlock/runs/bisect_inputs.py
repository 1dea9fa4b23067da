"""Bisect's inputs, read and checked: the two sides (`End`), what uv says of a set of pins
(resolves to exactly it? who needs whom?), the text of a probe's mixed lock, and a run's
metric. No target is touched here: the lab (commands/bisect_lab.py) builds and runs."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock.base.atomic import write_atomic
from envlock.errors import EnvlockError, UsageError
from envlock.lock.links import find_links_for, resolver_env
from envlock.lock.read import Lock
from envlock.profile.read import Profile
from envlock.runs.describe import flatten, load_side
from envlock.runs.diff import MANAGED_ENV

SNAPSHOT_FILE = "envlock-snapshot.json"
REDACTED_PREFIX = "<redacted sha256:"


# -- the two sides -------------------------------------------------------------------------
@dataclass(frozen=True)
class End:
    """GOOD or BAD as bisect reads it: the lock to rebuild, what the run recorded."""

    label: str
    lock: Lock
    env: dict[str, str] = field(default_factory=dict)
    warm: bool | None = None  # the compile cache's warmth (None: not recorded)
    config: dict[str, Any] = field(default_factory=dict)
    python: str | None = None
    scripts: dict[str, Any] = field(default_factory=dict)
    is_run: bool = False


def read_end(path: str) -> End:
    """A snapshot, a directory holding one, or a lock; refused when it has no lock."""
    side = load_side(path)
    if side.lock is None:
        raise UsageError(
            f"{path}: no lock to rebuild",
            hint="pass an envlock-snapshot.json, a directory holding one, or a pylock.*.toml",
        )
    record = side.snapshot
    if record is None:
        return End(path, side.lock, python=str(side.lock.meta.get("python-version") or ""))
    cache = record.cache
    return End(
        path,
        side.lock,
        env={k: v for k, v in record.env.items() if k not in MANAGED_ENV},
        warm=None if cache is None else bool(cache.exists and cache.files),
        config=flatten(record.config) if isinstance(record.config, dict) else {},
        python=str(side.lock.meta.get("python-version") or ""),
        scripts=dict(record.scripts),
        is_run=True,
    )


def not_tried(good: End, bad: End, mapped_config: set[str]) -> list[str]:
    """What differs but no probe reproduces: said with the answer."""
    notes = []
    if good.python != bad.python:
        notes.append(f"Python {good.python} → {bad.python} (each probe keeps GOOD's)")
    if good.scripts != bad.scripts:
        notes.append("the scripts (check out the code of the run you want to test)")
    hidden = [k for k in {*good.env, *bad.env} if is_redacted(good.env.get(k), bad.env.get(k))]
    notes += [f"{name} (recorded redacted)" for name in sorted(hidden)]
    config = {k for k in {*good.config, *bad.config} if good.config.get(k) != bad.config.get(k)}
    left = sorted(config - mapped_config)
    if left:
        notes.append(
            f"{len(left)} config value(s) ({', '.join(left[:3])}{' …' if len(left) > 3 else ''}): "
            "map one with --config KEY"
        )
    return notes


def is_redacted(*values: str | None) -> bool:
    return any(isinstance(v, str) and v.startswith(REDACTED_PREFIX) for v in values)


def reproducible_env(end: End, other: End) -> dict[str, str]:
    return {k: v for k, v in end.env.items() if not is_redacted(v, other.env.get(k))}


# -- resolution ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """uv's word on a set of pins: whether it resolves to exactly that set, and who needs
    whom among them (name → the packages that require it)."""

    ok: bool
    needs: dict[str, set[str]]
    why: str = ""


def resolve_pins(profile: Profile, versions: dict[str, str]) -> Resolved:
    """`uv pip compile` of `name==version` for every pin, from the profile's sources."""
    from envlock.lock.indexes import uv_index_env
    from envlock.lock.resolve import uv_compile_argv

    with tempfile.TemporaryDirectory(prefix="envlock-bisect-") as tmp:
        given = Path(tmp) / "probe.in"
        write_atomic(given, "".join(f"{n}=={v}\n" for n, v in versions.items()).encode())
        out = Path(tmp) / "probe.txt"
        argv = uv_compile_argv(profile, given, out, find_links_for(profile))
        argv[argv.index("--format") + 1] = "requirements.txt"
        argv.remove("--generate-hashes")
        argv += ["--annotation-style", "line"]
        env = {**(resolver_env(profile) or os.environ), **uv_index_env(profile)}
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            return Resolved(False, {}, " ".join(lines[-3:]).replace(tmp, "…"))
        # own: uv's answer, written into envlock's own temporary directory
        found, needs = parse_compiled(out.read_text())
    extra = sorted(set(found) - set(versions))
    if extra:
        return Resolved(False, needs, f"it also needs {', '.join(extra)}")
    return Resolved(True, needs)


def parse_compiled(text: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """`name==version  # via a, b, -r x` lines → versions and who needs each."""
    from packaging.utils import canonicalize_name

    versions: dict[str, str] = {}
    needs: dict[str, set[str]] = {}
    for line in text.splitlines():
        pin, _, via = line.partition("# via")
        name, sep, version = pin.strip().partition("==")
        if not sep:
            continue
        name = canonicalize_name(name)
        versions[name] = version.strip()
        parents = {canonicalize_name(p.strip()) for p in via.split(",") if p.strip()}
        needs[name] = {p for p in parents if not p.startswith("-")}
    return versions, needs


# -- the mixed lock ------------------------------------------------------------------------
def package_blocks(text: str) -> tuple[str, dict[str, str], str]:
    """A lock's text cut in three: before its first package, each `[[packages]]` block by
    name, and from its `[tool` tables on."""
    from packaging.utils import canonicalize_name

    head: list[str] = []
    tail: list[str] = []
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.strip() == "[[packages]]":
            current = [line]
            blocks[f"#{len(blocks)}"] = current
        elif line.startswith("[tool") or tail:
            tail.append(line)
        elif current is not None:
            current.append(line)
        else:
            head.append(line)
    named: dict[str, str] = {}
    for lines in blocks.values():
        name = next(
            (ln.split("=", 1)[1].strip().strip('"') for ln in lines if ln.startswith("name")), ""
        )
        named[str(canonicalize_name(name))] = "".join(lines).rstrip("\n") + "\n\n"
    return "".join(head), named, "".join(tail)


def mixed_text(good: Lock, bad: Lock, from_bad: frozenset[str]) -> str:
    """GOOD's lock with the packages of `from_bad` as BAD's has them (absent there: none)."""
    head, good_blocks, tail = package_blocks(good.install_text())
    _, bad_blocks, _ = package_blocks(bad.install_text())
    blocks = {n: b for n, b in good_blocks.items() if n not in from_bad}
    blocks.update({n: bad_blocks[n] for n in from_bad if n in bad_blocks})
    return head + "".join(blocks[n] for n in sorted(blocks)) + tail


def metric_of(stdout: str, name: str, out: Path) -> float | None:
    """The last JSON line of stdout holding `name`, else `envlock.snapshot(metrics=…)`'s file
    in $ENVLOCK_BISECT_DIR (`out`: here, or its copy from the target)."""
    found = metric_line(stdout, name)
    if found is not None or not os.path.lexists(out / SNAPSHOT_FILE):
        return found
    from envlock.runs.snapshot_file import load_snapshot

    try:
        metrics = load_snapshot(out).get("metrics") or {}
    except EnvlockError:
        return None
    return float(metrics[name]) if is_number(metrics.get(name)) else None


def metric_line(stdout: str, name: str) -> float | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and is_number(data.get(name)):
            return float(data[name])
    return None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
