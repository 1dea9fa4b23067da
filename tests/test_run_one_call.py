"""`envlock run` on a proxmox-lxc target: one round trip when the target is as last judged.

Counted, not timed: the test `pct` on the loopback node logs each `pct exec` (start/end
lines in pct.log). A real LXC container, a real ssh hop, the real agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.remote.fixtures import Node
from tests.test_remote import pct, ssh_lines, write_profile


def cli(cache: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a batch job runs it: stdin no terminal, its own user cache."""
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )


def round_trips(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("start "))


def test_a_run_on_a_container_as_judged_is_one_pct_exec(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, lxc_container: Any
) -> None:
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    target = [
        'type = "proxmox-lxc"',
        f"vmid = {vmid}",
        'root = "/opt/envroot"',
        'venv = "/opt/venv"',
        *ssh_lines(node_sshd),
    ]
    profile = write_profile(tmp_path / "p", wheelhouse, target, env={"MY_SETTING": "on"})
    cache = tmp_path / "user-cache"
    assert cli(cache, "apply", "-y", profile).returncode == 0
    log = node_sshd.pct_dir / "pct.log"
    program = "import os, sys, trainutil; print(os.environ['MY_SETTING']); sys.exit(7)"
    try:
        # First: nothing remembered. A probe, then the call that checks again and starts it
        # (carrying the startup set the container lacks).
        log.write_text("")
        first = cli(cache, "run", profile, "--", "python", "-c", program)
        assert (first.returncode, first.stdout) == (7, "on\n"), first.stderr
        assert round_trips(log) == 2
        # Then: the state judged last time, proposed and confirmed in one call.
        log.write_text("")
        again = cli(cache, "run", profile, "--", "python", "-c", program)
        assert (again.returncode, again.stdout, again.stderr) == (7, "on\n", "")
        assert round_trips(log) == 1

        # Drift since: the same one call brings the state back, and the refusal explains it
        # as `check` does; the command never started.
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
