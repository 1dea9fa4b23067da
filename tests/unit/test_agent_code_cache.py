"""The agent's compiled-code cache on a target (~/.cache/envlock): used when sound, rebuilt
when damaged, and never read from a directory another user could write."""

from __future__ import annotations

import marshal
import os
import time
from pathlib import Path

import pytest

from envlock.reconcile.agentcall import call_agent
from envlock.targets.local import LocalTransport


def probe(tmp_path: Path) -> dict[str, object]:
    return call_agent(LocalTransport(), str(tmp_path / "root"), "probe", {"root": str(tmp_path)})


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "envlock"


def test_the_first_call_keeps_the_compiled_agent_in_a_private_directory(
    tmp_path: Path, cache_home: Path
) -> None:
    assert probe(tmp_path)["root_exists"] is True
    (cached,) = compiled(cache_home)
    assert cached.name.startswith("agent-")
    assert (cache_home.stat().st_mode & 0o777) == 0o700
    assert isinstance(marshal.loads(cached.read_bytes()), list)
    assert not [p for p in cache_home.iterdir() if p.name.endswith(".tmp")]


def test_a_damaged_cache_file_is_compiled_again(tmp_path: Path, cache_home: Path) -> None:
    probe(tmp_path)
    (cached,) = compiled(cache_home)
    for damage in (b"", b"\x00garbage", cached.read_bytes()[:100]):
        cached.write_bytes(damage)
        assert probe(tmp_path)["root_exists"] is True
    assert isinstance(marshal.loads(cached.read_bytes()), list)  # rewritten whole


def compiled(cache_home: Path) -> list[Path]:
    """The compiled agent kept on the target. A local target shares the cache home with the
    controller, whose own entries (the packed agent, usercache.py) are directories."""
    return [p for p in cache_home.iterdir() if p.is_file() and p.name.startswith("agent-")]


def planted(marker: Path) -> bytes:
    """Code that leaves a marker: what someone else would put in a writable cache dir."""
    code = compile(f"open({str(marker)!r}, 'w').write('ran')", "planted", "exec")
    return marshal.dumps([code])


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_cache_directory_others_may_write_is_never_read(
    tmp_path: Path, cache_home: Path, mode: int
) -> None:
    probe(tmp_path)
    (cached,) = compiled(cache_home)
    marker = tmp_path / "planted-code-ran"
    cached.write_bytes(planted(marker))
    os.chmod(cache_home, mode)
    assert probe(tmp_path)["root_exists"] is True
    assert not marker.exists()
    assert cached.read_bytes() == planted(marker)  # nor written: it is not ours alone


def test_a_symlinked_cache_directory_is_not_trusted(tmp_path: Path, cache_home: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache_home.parent.mkdir()
    cache_home.symlink_to(elsewhere)
    marker = tmp_path / "planted-code-ran"
    probe(tmp_path)
    assert list(elsewhere.iterdir()) == []
    assert not marker.exists()


def test_a_new_compiled_agent_removes_those_written_a_month_ago(
    tmp_path: Path, cache_home: Path
) -> None:
    """An older envlock's compiled agents are never read again (their names are hashes):
    writing a new one removes those written more than 30 days ago, not a recent one, not
    what only looks like one, and not the controller's own entries (directories)."""
    cache_home.mkdir(parents=True, mode=0o700)
    month_ago = time.time() - 31 * 86400
    old = cache_home / f"agent-{'a' * 20}-cpython-311"
    recent = cache_home / f"agent-{'b' * 20}-cpython-311"
    lookalike = cache_home / "agent-notes"
    for path in (old, recent, lookalike):
        path.write_bytes(b"x")
    for path in (old, lookalike):
        os.utime(path, (month_ago, month_ago))
    assert probe(tmp_path)["root_exists"] is True
    assert not old.exists() and recent.exists() and lookalike.exists()
    assert len(compiled(cache_home)) == 3  # the new one, the recent one, the lookalike
