"""Caches opened by descriptor (agent/programs/bootstrap.py's `private_dir`): the target's
compiled agents and the controller's own caches (base/usercache.py) are walked to from `/`
one directory at a time, never through a link, and read, written and pruned relative to the
descriptor that was judged, so a directory swapped after a check is never used.

Runs as root (as the suite does); the second user is created once (`useradd -m`).
"""

from __future__ import annotations

import json
import marshal
import os
import pwd
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envlock.base import usercache
from envlock.reconcile.agentcall import agent_argv
from envlock.targets.local import LocalTransport

# Each test plants links and swaps files while envlock writes: in a mount namespace of
# its own, with a /dev of its own, where the kernel allows it (tests/mountns.py).
pytestmark = pytest.mark.usefixtures("private_mounts")

USER = "envlock-t39c"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"
# renameat2(RENAME_EXCHANGE) in a loop, as the other user: their tree and root's cache trade
# places; prints how many exchanges it made.
SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    a, b, until = sys.argv[1].encode(), sys.argv[2].encode(), float(sys.argv[3])
    count = 0
    while time.time() < until:
        if libc.renameat2(-100, a, -100, b, 2) == 0:
            count += 1
    print(count)
    """
)


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    try:
        found = pwd.getpwnam(USER)
    except KeyError:
        proc = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True)
        assert proc.returncode in (0, 9), f"useradd -m {USER}: {proc.stderr}"  # 9: exists
        found = pwd.getpwnam(USER)
    for name in (".cache", "mine", "canary"):
        shutil.rmtree(Path(found.pw_dir) / name, ignore_errors=True)
        (Path(found.pw_dir) / name).unlink(missing_ok=True)
    return found


def test_a_swapped_cache_directory_never_runs_their_code(
    tmp_path: Path, other: pwd.struct_passwd
) -> None:
    """Root's agent with HOME in another user's home (an ssh target's `sudo -E`): root made
    `~/.cache` there once; the user swaps it with a tree of theirs holding a compiled
    "agent" (its name is public: in argv) while root probes for 25 s."""
    home = Path(other.pw_dir)
    argv = agent_argv(LocalTransport(), str(tmp_path / "root"), "probe", env_python=False)
    key = re.search(r"bootstrap\('([0-9a-f]+)'", argv[-2] if len(argv) > 1 else "")
    key = key or re.search(r"bootstrap\('([0-9a-f]+)'", " ".join(argv))
    assert key is not None
    canary = home / "canary"
    payload = marshal.dumps([compile(f"open({str(canary)!r}, 'w').write('ran')", "p", "exec")])
    # Root's ~/.cache there, as an earlier run made it; the user's own tree beside it.
    (home / ".cache" / "envlock").mkdir(parents=True, mode=0o700)
    mine = home / "mine" / "envlock"
    mine.mkdir(parents=True)
    (mine / f"agent-{key[1]}-{sys.implementation.cache_tag}").write_bytes(payload)
    for path in (home / "mine", mine, *mine.iterdir()):
        os.chown(path, other.pw_uid, other.pw_gid)
    os.chmod(mine, 0o700)
    until = time.time() + 26
    swapper = subprocess.Popen(
        [SYSTEM_PYTHON, "-c", SWAPPER, str(home / ".cache"), str(home / "mine"), str(until)],
        user=other.pw_uid,
        group=other.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    runs, stop = 0, until - 1
    try:
        while time.time() < stop:
            subprocess.run(
                argv,
                input=json.dumps({"root": str(tmp_path)}),
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            runs += 1
            assert not canary.exists(), f"their code ran as root after {runs} probes"
    finally:
        swaps = int(swapper.communicate(timeout=60)[0] or 0)  # it stops by itself
    assert runs >= 40 and swaps >= 1000, (runs, swaps)  # the race was really run
    assert not canary.exists()


def test_a_linked_cache_directory_is_neither_written_nor_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/.cache/envlock/locks` a link (dotfiles, a cache moved to another disk): envlock
    writes nothing there and removes nothing from where it points."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    month_ago = time.time() - 40 * 86400
    old = elsewhere / "notes.json"
    old.write_text("{}")
    os.utime(old, (month_ago, month_ago))
    (cache / "envlock").mkdir(parents=True, mode=0o700)
    (cache / "envlock" / "locks").symlink_to(elsewhere)
    usercache.write_entry("locks", ["k"], {"v": 1})
    assert sorted(p.name for p in elsewhere.iterdir()) == ["notes.json"]
    assert usercache.read_entry("locks", ["k"]) is None
    # The same entry in a real directory is kept and read back (the test can see a write).
    (cache / "envlock" / "locks").unlink()
    usercache.write_entry("locks", ["k"], {"v": 1})
    assert usercache.read_entry("locks", ["k"]) == {"v": 1}


def test_a_cache_entry_that_is_a_link_or_a_fifo_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    usercache.write_entry("locks", ["k"], {"v": 1})
    path = Path(str(usercache.entry_path("locks", ["k"])))
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"v": 2}))
    path.unlink()
    path.symlink_to(target)
    assert usercache.read_entry("locks", ["k"]) is None
    path.unlink()
    os.mkfifo(path)
    started = time.monotonic()
    assert usercache.read_entry("locks", ["k"]) is None
    assert time.monotonic() - started < 5
