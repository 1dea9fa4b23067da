"""The lock's verdict kept by content hash (envlock/lock/verdict.py): the validator runs once
per distinct lock and policy; what a hit gives is exactly what the validator gives; any other
text, policy or entry shape is a miss, and a refused lock is never kept."""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path

import pytest

from envlock.errors import LockError
from envlock.lock import verdict as lock_cache
from envlock.lock.policy import SHOWN, STRICT, profile_policy
from envlock.lock.read import parse_lock

HERE = Path(__file__).resolve().parents[1]
# uv's pylock writes each wheel's upload-time as a TOML datetime: the cache must give it back.
UPLOADED = ", upload-time = 2026-11-23T18:01:12Z, size = 2"
TEXT = (
    (HERE / "build_locks" / "pylock.two.toml")
    .read_text()
    .replace('-py3-none-any.whl", hashes', f'-py3-none-any.whl"{UPLOADED}, hashes')
)
PATH = Path("/nonexistent/pylock.two.toml")


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "envlock" / "locks"


def fields(lock: object) -> tuple[object, ...]:
    return tuple(getattr(lock, name) for name in ("packages", "meta", "build", "policy", "text"))


def test_a_hit_is_exactly_what_the_validator_gives(private_cache: Path) -> None:
    assert "upload-time" in TEXT
    first = parse_lock(PATH, TEXT)
    assert len(list(private_cache.glob("*.json"))) == 1
    hit = lock_cache.cached_verdict(TEXT, STRICT)
    assert hit is not None
    again = parse_lock(PATH, TEXT)
    assert fields(again) == fields(first)
    wheel = again.packages["tinypkg"].wheels[0]
    assert wheel["upload-time"] == datetime.datetime(2026, 11, 23, 18, 1, 12, tzinfo=datetime.UTC)
    assert again.short_hash == first.short_hash


def test_another_text_or_policy_is_a_miss() -> None:
    parse_lock(PATH, TEXT)
    assert lock_cache.cached_verdict(TEXT + "\n", STRICT) is None
    assert lock_cache.cached_verdict(TEXT, SHOWN) is None
    assert lock_cache.cached_verdict(TEXT, profile_policy(("tinypkg",), "p.toml")) is None
    assert lock_cache.cached_verdict(TEXT, STRICT) is not None


def test_a_refused_lock_is_refused_every_time_and_never_kept(private_cache: Path) -> None:
    bad = TEXT.replace('\nversion = "1.0"', '\nversion = "not a version"', 1)
    for _ in range(2):
        with pytest.raises(LockError, match=r"packages\[0\]\.version"):
            parse_lock(PATH, bad)
    assert not list(private_cache.glob("*.json"))


def test_a_tampered_entry_is_a_miss_and_the_validator_decides(private_cache: Path) -> None:
    """The entry is this user's own data, private to them (who can write it can run code as
    them anyway); still, it is believed only for the very bytes it was written for."""
    parse_lock(PATH, TEXT)
    (entry,) = private_cache.glob("*.json")
    data = json.loads(entry.read_text())
    data["packages"][0]["version"] = "6.6.6"
    entry.write_text(json.dumps(data))
    assert parse_lock(PATH, TEXT).packages["tinypkg"].version == "6.6.6"  # this user's own
    data["sha256"] = "0" * 64
    entry.write_text(json.dumps(data))
    assert parse_lock(PATH, TEXT).packages["tinypkg"].version == "1.0"  # a miss: validated


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(schema=2),
        lambda d: d.update(packages="tinypkg"),
        lambda d: d.update(meta=[]),
        lambda d: d.update(build="tinypkg"),
        lambda d: d.update(build=[1]),
        lambda d: d["packages"][0].pop("sdist"),
        lambda d: d["packages"][0].update(extra=1),
        lambda d: d["packages"][0].update(version=1),
        lambda d: d["packages"][0].update(wheels=["x"]),
        lambda d: d["packages"][0].update(sdist="x"),
        lambda d: d["packages"][0]["wheels"][0].update({"upload-time": {"toml-datetime": 1}}),
        lambda d: d["packages"][0]["wheels"][0].update(
            {"upload-time": {"toml-datetime": ["epoch", "0"]}}
        ),
        lambda d: d["packages"][0]["wheels"][0].update(
            {"upload-time": {"toml-datetime": ["date", "not a date"]}}
        ),
    ],
)
def test_an_entry_of_another_shape_is_a_miss(change: object, private_cache: Path) -> None:
    parse_lock(PATH, TEXT)
    (entry,) = private_cache.glob("*.json")
    data = json.loads(entry.read_text())
    assert lock_cache.verdict_of(data, TEXT) is not None
    assert callable(change)
    change(data)
    assert lock_cache.verdict_of(data, TEXT) is None


def test_a_table_that_looks_like_a_tag_is_not_kept(private_cache: Path) -> None:
    """TOML data that would not come back from the cache as it is is simply not kept."""
    text = TEXT.replace(
        "[tool.envlock]\n", '[tool.envlock]\nx = { toml-datetime = ["date", "2026-01-01"] }\n'
    )
    lock = parse_lock(PATH, text)
    assert lock.meta["x"] == {"toml-datetime": ["date", "2026-01-01"]}
    assert not list(private_cache.glob("*.json"))
    assert fields(parse_lock(PATH, text)) == fields(lock)


def test_entries_no_one_asked_for_in_a_month_go_when_another_is_written(
    private_cache: Path,
) -> None:
    """Entries are named by hashes: an older lock's would stay for good. A write removes the
    kind's entries written more than 30 days ago, at most once a day; a recent one stays,
    and so does anything but an entry."""
    parse_lock(PATH, TEXT)
    (kept,) = private_cache.glob("*.json")
    old, other = private_cache / ("0" * 64 + ".json"), private_cache / "notes.txt"
    for path in (old, other):
        path.write_text("{}")
    month_ago = time.time() - 31 * 86400
    for path in (old, other):
        os.utime(path, (month_ago, month_ago))
    (private_cache / ".pruned").unlink()  # the first write pruned today: as if long ago
    parse_lock(PATH, TEXT + "\n")  # a miss: a new entry
    assert kept.exists() and other.exists() and not old.exists()
    assert len(list(private_cache.glob("*.json"))) == 2
    # Pruned today already: the next write lists nothing, whatever has grown old meanwhile.
    old.write_text("{}")
    os.utime(old, (month_ago, month_ago))
    parse_lock(PATH, TEXT + "\n\n")
    assert old.exists()
