"""End to end over the loopback node's sshd: a signal that comes before a remote run's
command starts, when the agent then answers that the state changed, stops envlock (exit
130) and the command never starts; the run loop does not judge the new state and send the
run again. tests/unit/test_run_start_signals.py places a signal at each moment of the start
with the real agent behind a scripted transport; this is the same moment through a real ssh.

The moment is placed by the ssh client itself: an `ssh` first on envlock's PATH that, for
the run's agent call, waits until envlock keeps SIGHUP (its handler for the start, in
`/proc/PID/status`'s caught mask: envlock catches no SIGHUP otherwise), sends it, then
execs the real ssh: the signal is envlock's before the request is sent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, envlock_env, ssh_target, write_profile

# SIGHUP is signal 1: bit 0 of SigCgt. Only the first agent call that is no `ssh -O`
# question to the master gets the signal (the trigger file is taken once).
SSH_WRAPPER = """#!/bin/sh
echo "$PPID $*" >> "{log}"
for arg in "$@"; do [ "$arg" = -O ] && exec "{ssh}" "$@"; done
if mv "{trigger}" "{trigger}.taken" 2>/dev/null; then
    i=0
    while [ $i -lt 1000 ]; do
        mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$PPID/status)
        [ $(( 0x$mask & 1 )) = 1 ] && break
        sleep 0.01; i=$((i+1))
    done
    kill -HUP $PPID
fi
exec "{ssh}" "$@"
"""


def test_a_hangup_before_the_start_on_a_changed_state_starts_nothing(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    root, venv = tmp_path / "root", tmp_path / "venv"
    profile = write_profile(tmp_path / "p", wheelhouse, ssh_target(root, venv, node_sshd))
    assert cli("apply", "-y", profile).returncode == 0
    first = cli("run", profile, "--", "true")  # the state is remembered after it
    assert first.returncode == 0, first.stderr
    with open(root / "history.jsonl", "a") as history:  # changed, and still runnable
        history.write('{"action": "note"}\n')

    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    trigger, started = tmp_path / "trigger", tmp_path / "started"
    log = tmp_path / "ssh.log"
    wrapper = SSH_WRAPPER.replace("{ssh}", str(shutil.which("ssh")))
    wrapper = wrapper.replace("{trigger}", str(trigger)).replace("{log}", str(log))
    (wrapper_dir / "ssh").write_text(wrapper)
    (wrapper_dir / "ssh").chmod(0o755)
    trigger.touch()
    env = envlock_env(PATH=f"{wrapper_dir}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "envlock", "run", str(profile), "--"]
    done = subprocess.run(
        [*argv, "sh", "-c", f': > "{started}"'],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    said = log.read_text() if log.exists() else "(ssh never ran)"
    assert not trigger.exists(), (done.returncode, done.stderr, said)  # the signal went
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "interrupted" in done.stderr
    assert not started.exists(), "the command the user stopped was started"
    # The state it answered was never judged again: a plain run starts the command.
    again = cli("run", profile, "--", "sh", "-c", f': > "{started}"')
    assert again.returncode == 0 and started.exists(), again.stderr
