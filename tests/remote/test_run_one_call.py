"""`envlock run` on a proxmox-lxc target: one round trip when the target is as last judged.

Counted, not timed: the test `pct` on the loopback node logs each `pct exec` (start/end
lines in pct.log). A real LXC container, a real ssh hop, the real agent.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.remote.fixtures import Node
from tests.remote.test_remote import envlock_env, lxc_profile, pct, pve_api  # noqa: F401 (a fixture)


def cli(cache: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a batch job runs it: stdin no terminal, its own user cache."""
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**envlock_env(), "XDG_CACHE_HOME": str(cache)},
    )


def from_terminal(
    cache: Path, *args: str | Path, keys: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    """envlock with a terminal for stdin (`keys` typed into it)."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, keys)
        return subprocess.run(
            [sys.executable, "-m", "envlock", *map(str, args)],
            capture_output=True,
            stdin=follower,
            env={**envlock_env(), "XDG_CACHE_HOME": str(cache)},
            timeout=120,
        )
    finally:
        os.close(leader)
        os.close(follower)


def round_trips(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("start "))


def test_a_run_on_a_container_as_judged_is_one_pct_exec(
    lxc_profile: tuple[Path, int],  # noqa: F811 (test_remote's fixture)
    node_sshd: Node,
    fakepve_url: str,
    fakepve_cafile: str,
    tmp_path: Path,
) -> None:
    """The profile declares a [container]: its API is asked while the agent probes, and the
    agent starts the command only on the controller's word."""
    profile, vmid = lxc_profile
    cache = tmp_path / "user-cache"
    log = node_sshd.pct_dir / "pct.log"
    program = "import os, sys, trainutil; print(os.environ['NASTY'][:4]); sys.exit(7)"
    assert cli(cache, "apply", "-y", profile).returncode == 0
    try:
        # The first run after an apply, one with --snapshot-into: the state the apply's last
        # probe found (asked as such a run asks: the cache's warmth, the generation's lock)
        # is proposed, and the startup set the container lacks travels with it.
        first_into = tmp_path / "ckpt-first"
        first_into.mkdir()
        log.write_text("")
        args = ("run", "--snapshot-into", first_into, profile, "--", "python", "-c", program)
        after = cli(cache, *args)
        assert (after.returncode, after.stdout) == (7, "it's\n"), after.stderr
        snap = json.loads((first_into / "envlock-snapshot.json").read_text())
        assert snap["command"][-1] == program and round_trips(log) == 1, snap
        # A run without it proposes the same state, less what it does not ask.
        log.write_text("")
        plain = cli(cache, "run", profile, "--", "python", "-c", program)
        assert (plain.returncode, plain.stdout, plain.stderr) == (7, "it's\n", "")
        assert round_trips(log) == 1

        # Nothing remembered (another user cache than apply's): a probe, then the call that
        # checks again and starts it.
        log.write_text("")
        first = cli(tmp_path / "other-cache", "run", profile, "--", "python", "-c", program)
        assert (first.returncode, first.stdout) == (7, "it's\n"), first.stderr
        assert round_trips(log) == 2
        # Then: the state judged last time, proposed and confirmed in one call.
        log.write_text("")
        again = cli(cache, "run", profile, "--", "python", "-c", program)
        assert (again.returncode, again.stdout, again.stderr) == (7, "it's\n", "")
        assert round_trips(log) == 1

        # A terminal's run: the same one call; the agent gives the command a terminal of its
        # own, and the user's shows only the command's bytes (no ssh chatter such as "Shared
        # connection to … closed.", no NUL, "\n" translated once).
        log.write_text("")
        tty = from_terminal(cache, "run", profile, "--", "python", "-c", program)
        assert (tty.returncode, tty.stdout, tty.stderr) == (7, b"it's\r\n", b"")
        assert round_trips(log) == 1
        # Its keys reach the command, as typed.
        log.write_text("")
        reverse = "print(input()[::-1])"
        typed = from_terminal(cache, "run", profile, "--", "python", "-c", reverse, keys=b"abc\r")
        assert typed.returncode == 0 and typed.stdout.endswith(b"cba\r\n"), typed
        assert round_trips(log) == 1

        # --snapshot-into: written between the agent's check and its start, in the same call.
        for n, terminal in enumerate((False, True)):
            into = tmp_path / f"ckpt-{n}"
            into.mkdir()
            log.write_text("")
            args = ("run", "--snapshot-into", into, profile, "--", "python", "-c", program)
            done = from_terminal(cache, *args) if terminal else cli(cache, *args)
            assert done.returncode == 7, done.stderr
            snap = json.loads((into / "envlock-snapshot.json").read_text())
            assert snap["command"][-1] == program and round_trips(log) == 1, snap
        # One already there stops the run before its command starts, in the same call.
        log.write_text("")
        again = cli(cache, "run", "--snapshot-into", into, profile, "--", "python", "-c", program)
        assert again.returncode == 2 and "a snapshot is already here" in again.stderr
        assert "it's" not in again.stdout and round_trips(log) == 1

        # The container drifted (its API says so): the agent found the state as judged and
        # waited; the controller said no, and explains as `check` would.
        api = pve_api(fakepve_url, fakepve_cafile)
        api.nodes("pve1").lxc(vmid).config.put(cores=8)
        log.write_text("")
        refused = cli(cache, "run", profile, "--", "python", "-c", "print('started')")
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.startswith("envlock: refusing to run: 1 drift item(s)")
        assert "cores" in refused.stderr and "started" not in refused.stdout
        assert round_trips(log) == 1
        api.nodes("pve1").lxc(vmid).config.put(cores=2)

        # The environment drifted since: the same one call brings the state back, and the
        # refusal explains it as `check` does; the command never started.
        script = "/opt/train dir/train.py"
        assert pct(node_sshd, vmid, "sh", "-c", f"echo '# edited' >> '{script}'").returncode == 0
        log.write_text("")
        refused = cli(cache, "run", profile, "--", "python", "-c", "print('started')")
        assert refused.returncode == 1
        assert refused.stderr.startswith("envlock: refusing to run: 1 drift item(s)")
        assert "train.py" in refused.stderr and "started" not in refused.stdout
        assert round_trips(log) == 1
        checked = cli(cache, "check", "--json", profile)
        assert [d["kind"] for d in json.loads(checked.stdout)["drift"]] == ["script-modified"]
        # An apply repairs it; the first run after, one without --snapshot-into, proposes
        # what the apply's last probe found, as that lighter probe finds it: one call.
        assert cli(cache, "apply", "-y", profile).returncode == 0
        log.write_text("")
        repaired = cli(cache, "run", profile, "--", "python", "-c", program)
        assert (repaired.returncode, repaired.stdout, repaired.stderr) == (7, "it's\n", "")
        assert round_trips(log) == 1

    finally:
        log.unlink(missing_ok=True)


def test_the_controller_and_the_agent_hash_a_state_alike() -> None:
    from envlock.agent import launch
    from envlock.runs import one_call

    # Keys that are not strings become strings on the way: both hash the state as it travels.
    state = {"b": [1, 2.5, None, True], "a": {"x": "é", "10": 1, "9": 2}, "c": (1, 2)}
    assert launch.state_digest(state) == one_call.state_digest(state)
    assert one_call.state_digest(json.loads(json.dumps(state))) == launch.state_digest(state)
    assert launch.state_digest({**state, "c": [1, 3]}) != one_call.state_digest(state)
