"""Quoting at each hop, as behaviour: what a real shell makes of the one string ssh sends.

The ssh hop joins an argv into the one string the remote shell parses; the pct hop wraps an
argv in `pct exec VMID --keep-env 0 -- env -i K=V … argv` so that nothing of the node's
environment reaches the container. Hostile values here have no whitespace on purpose: a
quoting rule that only quotes words with spaces must fail these tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.targets.pct import BASE_ENV, PctTransport
from envlock.targets.ssh import SshTransport

# No whitespace in any of them: each must still reach the command as one literal argument.
HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "a;touch {marker}",
    "a&&touch${{IFS}}{marker}",
    "a|tee${{IFS}}{marker}",
    ">{marker}",
    "'\"",
    "\\",
    "*",
    "~",
    "$HOME",
    "#comment",
    "!x",
    "",
    "a\nb",
]

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
ECHO_ENV = "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))"


def hostile(tmp_path: Path) -> tuple[list[str], Path]:
    marker = tmp_path / "pwned"
    return [value.format(marker=marker) for value in HOSTILE], marker


def remote_shell(command: str, env: dict[str, str] | None = None) -> str:
    """What sshd does with the string: the login shell parses it (`sh -c`)."""
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the ssh hop ----------------------------------------------------------------------------


def test_every_hostile_argument_reaches_the_command_literally(tmp_path: Path) -> None:
    values, marker = hostile(tmp_path)
    command = SshTransport("host").remote_command([sys.executable, "-c", ECHO_ARGV, *values], None)
    assert json.loads(remote_shell(command)) == values
    assert not marker.exists()


@pytest.mark.parametrize("value", [v for v in HOSTILE if v.strip() == v and v])
def test_each_hostile_argument_alone(tmp_path: Path, value: str) -> None:
    # One at a time, so a failure names the value a quoting rule let through.
    literal = value.format(marker=tmp_path / "pwned")
    command = SshTransport("host").remote_command([sys.executable, "-c", ECHO_ARGV, literal], None)
    assert json.loads(remote_shell(command)) == [literal]
    assert not (tmp_path / "pwned").exists()


def test_environment_values_reach_the_command_literally(tmp_path: Path) -> None:
    values, marker = hostile(tmp_path)
    env = {f"V{i}": value for i, value in enumerate(values)}
    command = SshTransport("host").remote_command([sys.executable, "-c", ECHO_ENV, *env], env)
    assert command.startswith("env ")
    assert json.loads(remote_shell(command)) == env
    assert not marker.exists()


def test_without_env_the_argv_is_joined_as_it_is() -> None:
    transport = SshTransport("host")
    assert transport.remote_command(["python3", "-c", "x"], None) == "python3 -c x"
    assert transport.remote_command(["python3", "-c", "x"], {}) == "python3 -c x"
    assert transport.remote_command(["a b"], {"K": "v w"}) == "env 'K=v w' 'a b'"


# -- the pct hop ----------------------------------------------------------------------------


def pct() -> PctTransport:
    return PctTransport(SshTransport("node"), 101)


def test_pct_wrap_clears_the_environment_at_both_layers() -> None:
    wrapped = pct().wrap(["python3", "-c", "x"], {"HF_HOME": "/data"})
    assert wrapped == [
        "pct",
        "exec",
        "101",
        "--keep-env",
        "0",
        "--",
        "env",
        "-i",
        *(f"{k}={v}" for k, v in BASE_ENV.items()),
        "HF_HOME=/data",
        "python3",
        "-c",
        "x",
    ]


def test_pct_wrap_gives_the_base_environment_and_lets_the_caller_override_it() -> None:
    wrapped = pct().wrap(["true"], {"PATH": "/opt/bin", "EXTRA": "1"})
    assigned = wrapped[wrapped.index("-i") + 1 : -1]
    assert assigned == [
        "PATH=/opt/bin",
        f"HOME={BASE_ENV['HOME']}",
        f"LANG={BASE_ENV['LANG']}",
        f"USER={BASE_ENV['USER']}",
        "EXTRA=1",
    ]
    assert pct().wrap(["true"], None)[-1 - len(BASE_ENV) :] == [
        *(f"{k}={v}" for k, v in BASE_ENV.items()),
        "true",
    ]


def fake_pct(tmp_path: Path) -> Path:
    """A `pct` that does what PVE's does with `exec VMID [--keep-env 0|1] -- argv`: with
    keep-env (the default) the node's environment passes on; here the "container" is this
    machine, so the only thing under test is what envlock's argv lets through."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    script = bin_dir / "pct"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = exec ] || exit 2\n'
        "shift 2\n"
        'keep=1\nif [ "$1" = --keep-env ]; then keep=$2; shift 2; fi\n'
        '[ "$1" = -- ] || exit 2\nshift\n'
        'if [ "$keep" = 0 ]; then exec env -i PATH="$PATH" "$@"; fi\n'
        'exec "$@"\n'
    )
    script.chmod(0o755)
    return bin_dir


def test_the_nodes_environment_never_reaches_the_container(tmp_path: Path) -> None:
    """ssh hop + pct hop through real shells: a canary in the node's environment (as sshd's
    would be) is not seen by the command, and hostile values still arrive literally."""
    values, marker = hostile(tmp_path)
    transport = pct()
    names = ["NODE_CANARY", "PYTHONPATH", "HF_TOKEN", "VALUE"]
    program = (
        f"import json, os, sys; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}));"
        " print(json.dumps(sys.argv[1:]))"
    )
    wrapped = transport.wrap([sys.executable, "-c", program, *values], {"VALUE": values[0]})
    command = transport.node.remote_command(wrapped, None)
    node_env = {
        **os.environ,
        "PATH": f"{fake_pct(tmp_path)}:{os.environ['PATH']}",
        "NODE_CANARY": "leaked",
        "PYTHONPATH": "/node/site",
        "HF_TOKEN": "node-secret",
    }
    seen_env, seen_argv = remote_shell(command, node_env).splitlines()
    assert json.loads(seen_env) == {
        "NODE_CANARY": None,
        "PYTHONPATH": None,
        "HF_TOKEN": None,
        "VALUE": values[0],
    }
    assert json.loads(seen_argv) == values
    assert not marker.exists()
