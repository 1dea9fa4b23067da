"""envlock's own cache on this machine (base/usercache.py), in-process: where an entry
lives, what a read returns, what a write makes and what pruning removes. The swapped and
linked cache directories are tests/trust/test_caches.py's."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from envlock.base import usercache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    place = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(place))
    return place


def test_an_entry_is_named_by_the_hash_of_its_key_under_the_kind(cache: Path) -> None:
    key = {"b": 1, "a": [2, None]}
    digest = hashlib.sha256(b'{"a": [2, null], "b": 1}').hexdigest()
    assert usercache.cache_dir("run-states") == f"{cache}/envlock/run-states"
    assert usercache.entry_path("run-states", key) == f"{cache}/envlock/run-states/{digest}.json"


def test_without_an_absolute_cache_home_nothing_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert usercache.cache_dir("k") is None and usercache.entry_path("k", 1) is None
    usercache.write_entry("k", 1, {"x": 1})
    assert usercache.read_entry("k", 1) is None
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty: the home's ~/.cache
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert usercache.cache_dir("k") == f"{tmp_path}/home/.cache/envlock/k"


def test_a_write_is_read_back_private_and_a_miss_is_none(cache: Path) -> None:
    assert usercache.read_entry("kind", ["k"]) is None  # nothing there yet
    usercache.write_entry("kind", ["k"], {"state": [1, "two"]})
    assert usercache.read_entry("kind", ["k"]) == {"state": [1, "two"]}
    assert usercache.read_entry("kind", ["other"]) is None
    assert usercache.read_entry("other-kind", ["k"]) is None
    path = Path(str(usercache.entry_path("kind", ["k"])))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for made in (cache, cache / "envlock", cache / "envlock" / "kind"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    path.write_text("{not json")
    assert usercache.read_entry("kind", ["k"]) is None
    path.write_text("null")
    assert usercache.read_entry("kind", ["k"]) is None


def test_a_directory_others_may_write_is_neither_read_nor_written(cache: Path) -> None:
    usercache.write_entry("kind", 1, {"a": 1})
    kind = cache / "envlock" / "kind"
    kind.chmod(0o777)
    assert usercache.read_entry("kind", 1) is None
    usercache.write_entry("kind", 2, {"b": 2})
    assert not Path(str(usercache.entry_path("kind", 2))).exists()


def age(path: Path, days: float) -> None:
    then = time.time() - days * 86400
    os.utime(path, (then, then))


def test_a_write_prunes_entries_of_a_month_ago_once_a_day(cache: Path) -> None:
    usercache.write_entry("kind", "new", 1)
    kind = cache / "envlock" / "kind"
    marker = kind / usercache.PRUNED
    assert marker.is_file() and stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert marker.read_bytes() == b""  # only its mtime says anything
    old = Path(str(usercache.entry_path("kind", "old")))
    old.write_text("1")
    age(old, 31)
    kept = kind / "notes.txt"  # not an entry: never pruned
    kept.write_text("")
    age(kept, 90)
    young = Path(str(usercache.entry_path("kind", "young")))
    young.write_text("2")
    age(young, 29)
    usercache.write_entry("kind", "again", 3)  # pruned less than a day ago: nothing removed
    assert old.exists()
    age(marker, 1.01)
    usercache.write_entry("kind", "later", 4)
    assert not old.exists() and kept.exists() and young.exists()
    assert usercache.read_entry("kind", "later") == 4
    assert time.time() - marker.stat().st_mtime < 60  # written afresh


def test_only_the_cache_s_own_three_levels_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "missing" / "cache"))
    usercache.write_entry("kind", 1, 1)  # a cache home under a missing directory: nothing
    assert not (tmp_path / "missing").exists()
    (tmp_path / "missing").mkdir()
    usercache.write_entry("kind", 1, 1)
    assert usercache.read_entry("kind", 1) == 1


def test_a_write_that_fails_costs_only_the_work(cache: Path) -> None:
    usercache.write_entry("kind", 1, 1)
    Path(str(usercache.entry_path("kind", 2))).mkdir()  # the entry's name is a directory
    usercache.write_entry("kind", 2, 2)  # best effort: no error
    assert usercache.read_entry("kind", 2) is None
