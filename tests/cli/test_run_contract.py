"""The run and exit contract, through real processes: signals reach the training command
(locally it *is* the process; over ssh envlock forwards them), its exit status comes back,
envlock's own refusals are unmistakable, a remote command gets only what it is given, and
interrupts and -v keep their exit codes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, ssh_target, write_profile

TRAP = """
import os, signal, sys, time
marker = sys.argv[1]
def stop(signum, frame):
    with open(marker, "w") as handle:
        handle.write("checkpointed on %d\\n" % signum)
    sys.exit(42)
signal.signal(signal.SIGTERM, stop)
with open(marker + ".ready", "w") as handle:
    handle.write(str(os.getpid()))
for _ in range(600):
    time.sleep(0.1)
sys.exit(3)
"""


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until the command says it is ready (its own file), or it ended: no fixed delay."""
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the command ended early: {proc.communicate()}")
        time.sleep(0.05)


@pytest.fixture
def seed(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    return profile


def test_sigterm_reaches_the_local_command_which_replaces_envlock(
    seed: Path, tmp_path: Path
) -> None:
    script, marker = tmp_path / "trap.py", tmp_path / "marker"
    script.write_text(TRAP)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envlock",
            "run",
            str(seed),
            "--",
            "python",
            str(script),
            str(marker),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(Path(f"{marker}.ready"), proc)
    # The command is the process envlock was: same pid, no child left to orphan.
    assert Path(f"{marker}.ready").read_text() == str(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 42, err
    assert marker.read_text() == f"checkpointed on {int(signal.SIGTERM)}\n"


def test_sigterm_is_forwarded_over_ssh_and_the_status_returned(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    root = tmp_path / "ssh root"
    target = ssh_target(root, tmp_path / "venv", node_sshd)
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    assert cli("apply", "-y", profile).returncode == 0
    script, marker = tmp_path / "trap.py", tmp_path / "marker"
    script.write_text(TRAP)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envlock",
            "run",
            str(profile),
            "--",
            "python",
            str(script),
            str(marker),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ENVLOCK_TEST_PVE_PASSWORD": "secret"},
    )
    wait_for(Path(f"{marker}.ready"), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 42, err
    assert marker.read_text() == f"checkpointed on {int(signal.SIGTERM)}\n"
    # Nothing is left on the target: the one-call run writes no env or pid file at all.
    assert not (root / "run").exists() or not list((root / "run").iterdir())


# An ssh that holds back the first line the agent's `run` answers (that it started the
# command) for a second, saying so in a file first: a signal sent then finds the command
# started and envlock still waiting for the word.
HOLD_ANSWER = """#!/bin/bash
set -o pipefail
case "${@: -1}" in
  *" run") ;;
  *) exec REAL "$@" ;;
esac
REAL "$@" | { IFS= read -r first; : > HELD; sleep 1; printf '%s\\n' "$first"; exec cat; }
"""


ENVLOCK_RUN = [sys.executable, "-m", "envlock", "run"]


def held_ssh_project(
    tmp_path: Path, wheelhouse: Path, node: Node, shim: str
) -> tuple[Path, Path, Path, dict[str, str]]:
    """An applied project on an ssh target, TRAP in `trap.py`, and an `ssh` first on PATH
    written from `shim` (REAL: the real ssh; HELD: the file it makes when it holds back):
    (the profile, the target's root, the HELD file, the environment to run envlock in)."""
    root = tmp_path / "ssh root"
    target = ssh_target(root, tmp_path / "venv", node)
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    assert cli("apply", "-y", profile).returncode == 0
    shims, held = tmp_path / "shims", tmp_path / "held"
    shims.mkdir()
    real = shutil.which("ssh")
    assert real is not None
    (shims / "ssh").write_text(shim.replace("REAL", real).replace("HELD", str(held)))
    (shims / "ssh").chmod(0o755)
    (tmp_path / "trap.py").write_text(TRAP)
    return profile, root, held, {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}"}


def start_run(env: dict[str, str], *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ENVLOCK_RUN, *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_signal_while_the_remote_command_starts_reaches_it(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    """SIGTERM arrives while the agent's word that it started the command is on its way:
    envlock forwards it once the word comes, so the command is never left running after
    envlock exits (before, envlock ended at once with 130 and the command ran on)."""
    profile, root, held, env = held_ssh_project(tmp_path, wheelhouse, node_sshd, HOLD_ANSWER)
    script, marker = tmp_path / "trap.py", tmp_path / "marker"
    proc = start_run(env, profile, "--", "python", script, marker)
    wait_for(held, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 42, err
    assert marker.read_text() == f"checkpointed on {int(signal.SIGTERM)}\n"

    # The same signal while the agent answers that the environment changed (nothing
    # started): envlock stops as interrupted, and says so, once the answer is in.
    (tinydep,) = root.glob("current/lib/python*/site-packages/tinydep/__init__.py")
    tinydep.unlink()
    held.unlink()
    proc = start_run(env, profile, "--", "python", script, f"{marker}.2")
    wait_for(held, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.strip()) == (130, "error: interrupted: nothing changed")
    assert not Path(f"{marker}.2.ready").exists()


def test_a_remote_command_gets_only_what_it_is_given_and_no_secret_in_argv(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    root = tmp_path / "ssh root"
    target = ssh_target(root, tmp_path / "venv", node_sshd)
    profile = write_profile(
        tmp_path / "p",
        wheelhouse,
        target,
        env={"MY_SETTING": "on"},
        extra='\n[run]\npass-env = ["WANDB_API_KEY"]\n',
    )
    assert cli("apply", "-y", profile).returncode == 0
    secrets = {
        "AWS_SECRET_ACCESS_KEY": "aws-canary-41b7",
        "HF_TOKEN": "hf-canary-93c2",
        "WANDB_API_KEY": "wandb-canary-77d0",
        "ENVLOCK_TEST_PVE_PASSWORD": "pve-canary-1e5f",
    }
    ready, go = tmp_path / "ready", tmp_path / "go"
    # The command stays up until the test has read every process's argv: no fixed window.
    probe = (
        "import json, os, sys, time\n"
        f"open({str(ready)!r}, 'w').write('x')\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print(json.dumps(dict(os.environ)))\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envlock",
            "run",
            "--env",
            "HF_TOKEN",
            str(profile),
            "--",
            "python",
            "-c",
            probe,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **secrets, "PATH": "/controller-only/bin:" + os.environ["PATH"]},
    )
    wait_for(ready, proc)
    # Every process on this machine (controller and loopback node alike), while it runs.
    argvs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    go.write_text("")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    for value in secrets.values():
        assert value not in argvs
    import json

    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["HF_TOKEN"] == "hf-canary-93c2"  # named with --env
    assert seen["WANDB_API_KEY"] == "wandb-canary-77d0"  # named in [run] pass-env
    assert "AWS_SECRET_ACCESS_KEY" not in seen and "ENVLOCK_TEST_PVE_PASSWORD" not in seen
    assert seen["MY_SETTING"] == "on" and seen["VIRTUAL_ENV"].startswith(str(root))
    assert seen["PATH"].startswith(f"{seen['VIRTUAL_ENV']}/bin:")
    assert "/controller-only/bin" not in seen["PATH"]


def test_exit_statuses_of_run(seed: Path, tmp_path: Path, envlock: Envlock) -> None:
    script = tmp_path / "script.py"
    script.write_text("print('hi')\n")
    script.chmod(0o644)
    no_x = envlock("run", seed, "--", str(script))
    assert no_x.returncode == 126 and "not executable" in no_x.stderr
    assert f"python {script}" in no_x.stderr and "Traceback" not in no_x.stderr
    missing = envlock("run", seed, "--", "no-such-command-x")
    assert missing.returncode == 127 and "command not found" in missing.stderr
    for argv, code in (([str(script)], 126), (["no-such-command-x"], 127)):
        documented = envlock("run", "--json", seed, "--", *argv)
        assert documented.returncode == code, documented.stderr
        error = json.loads(documented.stdout)
        assert error["exit"] == code and error["error"] in documented.stderr, error
    # Executable, but nothing the kernel can run (ENOEXEC: a script with no `#!` line).
    plain = tmp_path / "plain"
    plain.write_bytes(b"\x00\x01not a program\n")
    plain.chmod(0o755)
    foreign = envlock("run", seed, "--", str(plain))
    assert foreign.returncode == 126 and "Traceback" not in foreign.stderr, foreign.stderr
    kernel = f"envlock: cannot execute: {plain} is not a program the kernel can run"
    assert kernel in foreign.stderr
    documented = envlock("run", "--json", seed, "--", str(plain))
    assert documented.returncode == 126 and json.loads(documented.stdout)["exit"] == 126
    passed = envlock("run", seed, "--", "python", "-c", "raise SystemExit(3)")
    assert passed.returncode == 3 and passed.stderr == ""


def test_a_refusal_is_unmistakable_and_its_status_configurable(
    seed: Path, tmp_path: Path, envlock: Envlock
) -> None:
    (seed.parent / "scripts" / "train.py").write_text("print('changed')\n")
    refused = envlock("run", seed, "--", "true")
    assert refused.returncode == 1
    assert refused.stderr.startswith("envlock: refusing to run")
    assert f"fix: `envlock lock {seed}`" in refused.stderr  # a stale lock: re-lock, not apply
    env = {**os.environ, "ENVLOCK_RUN_REFUSED_EXIT": "75"}
    custom = subprocess.run(
        [sys.executable, "-m", "envlock", "run", str(seed), "--", "true"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert custom.returncode == 75


def test_verbose_keeps_the_exit_code(tmp_path: Path, envlock: Envlock) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[profile]\nname = "x"\n')
    result = envlock("-v", "check", bad)
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "missing required table [target]" in result.stderr


def in_a_terminal(argv: list[str], answer: bytes | None) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as stdin/stdout/stderr; type `answer` at the prompt,
    or send Ctrl-C (SIGINT) when `answer` is None."""
    leader, follower = pty.openpty()
    # A shell's background job (a CI runner's, say) starts with SIGINT ignored, and Python
    # then never turns it into KeyboardInterrupt: give the command a terminal's default.
    proc = subprocess.Popen(
        argv,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(follower)
    seen = b""
    while b"apply this plan?" not in seen:
        chunk = os.read(leader, 4096)
        if not chunk:
            break
        seen += chunk
    if answer is None:
        # A SIGINT that lands between Python's last signal check and its blocking read of
        # the terminal waits for the read (CPython's own race): press Ctrl-C again, as a
        # person would, until the prompt gives up.
        for _ in range(30):
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
                break
    else:
        os.write(leader, answer)
    code = proc.wait(timeout=60)
    while select.select([leader], [], [], 0.2)[0]:  # what it printed before it ended
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return code, seen.decode(errors="replace")


def test_declining_or_interrupting_the_prompt_changes_nothing(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    argv = [sys.executable, "-m", "envlock", "apply", str(profile)]
    code, shown = in_a_terminal(argv, b"n\n")
    assert code == 1 and "nothing changed" in shown and "Aborted" not in shown
    code, shown = in_a_terminal(argv, None)
    assert code == 130 and "interrupted: nothing changed" in shown
    assert not (tmp_path / "proj" / "root" / "current").exists()


def test_before_any_apply_every_command_says_to_apply(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    check = envlock("check", profile)
    assert check.returncode == 1 and "nothing applied yet" in check.stdout
    assert f"fix: `envlock apply {profile}`" in check.stderr
    rollback = envlock("rollback", profile)
    assert rollback.returncode == 2 and "nothing applied yet" in rollback.stderr
    assert "envlock apply" in rollback.stderr and "--resync" not in rollback.stderr
    snapshot = envlock("snapshot", profile, tmp_path / "ckpt")
    assert snapshot.returncode == 2 and "nothing applied yet" in snapshot.stderr
    assert not (tmp_path / "ckpt" / "envlock-snapshot.json").exists()
    for result in (check, rollback, snapshot):
        assert "None" not in result.stdout + result.stderr
        assert "PROFILE" not in result.stdout + result.stderr
