"""The agent's `run` (envlock/agent/launch.py) and the programs of interactive remote runs,
the launcher (agent/programs/launcher.py, shipped as runs/launch.py's LAUNCHER) and the
startup set's installer (agent/programs/installer.py, runs/startup_set.py's INSTALLER), start
a command and install the startup set by one set of rules (agent/start.py). Fed the same
inputs, each way in does the same thing: the command gets the same environment, PATH, argv,
working directory and process group, a missing or unexecutable command ends the same way,
and the startup set lands (or is refused) the same way. Real processes on both sides, the
programs as shipped (`python -I -S -c PROGRAM`)."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlock.agent import launch as agent_launch
from envlock.runs.launch import LAUNCHER, spec_of
from envlock.runs.startup_set import INSTALLER, version_of

# What the command reports of how it was started.
REPORT = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ),"
    " 'cwd': os.getcwd(), 'own_group': os.getpgid(0) == os.getpid()}))"
)
# The agent's start(), as its `run` calls it once the state is the one judged.
AGENT_START = (
    "import json, sys; from envlock.agent.launch import start; "
    "start(json.loads(sys.argv[1]), sys.argv[2:])"
)


def base_env(home: Path) -> dict[str, str]:
    """The target's own environment, as ssh or pct exec leave it."""
    return {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "KEEP": "kept", "DROP": "dropped", "OVER": "old"}  # fmt: skip


def via_launcher(tmp: Path, spec: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    run_dir = tmp / "run"
    run_dir.mkdir(exist_ok=True)
    env_file = run_dir / "t.env"
    env_file.write_text(json.dumps(spec))
    pid_file = run_dir / "t.pid"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", LAUNCHER, str(env_file), str(pid_file), *argv],
        env=base_env(tmp),
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert not env_file.exists()  # read, then deleted
    said = pid_file.read_text() if pid_file.exists() else None
    return {"code": done.returncode, "stderr": done.stderr, "out": done.stdout, "said": said}


def via_agent(tmp: Path, spec: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", AGENT_START, json.dumps(spec), *argv],
        env=base_env(tmp),
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    lines = done.stdout.splitlines(keepends=True)
    said = json.loads(lines[0])["run"]["target"] if lines else None  # the process group
    out = "".join(lines[1:])
    return {"code": done.returncode, "stderr": done.stderr, "out": out, "said": said}


def outcome(seen: dict[str, Any]) -> dict[str, Any]:
    """What the command saw, with the pids (which differ) reduced to what they say."""
    report = json.loads(seen["out"]) if seen["out"] else None
    said = seen["said"]
    return {
        "code": seen["code"],
        "stderr": seen["stderr"],
        "report": report,
        "said_a_group": said is not None and said.startswith("-"),
    }


ENV_CASES = {
    "the target's PATH kept": ({"A": "1", "OVER": "new"}, ("DROP",), None),
    "the profile's PATH": ({"A": "1"}, (), "/opt/tools/bin:/usr/bin"),
    "an empty PATH declared": ({}, ("DROP", "NOT-SET"), ""),
    "hard values": ({"NL": "a\nb", "EQ": "x=y", "U": "ü ✓", "E": ""}, (), None),
    "PATH in the env is not passed": ({"PATH": "/evil", "B": "2"}, (), None),
}
ARGVS = [[], ["a b", "", "'q'", '"d"', "ü", "--x=$HOME", "*"]]


@pytest.mark.parametrize("case", ENV_CASES)
@pytest.mark.parametrize("args", ARGVS, ids=["no-args", "hard-args"])
def test_both_start_the_command_alike(tmp_path: Path, case: str, args: list[str]) -> None:
    env, unset, declared = ENV_CASES[case]
    spec = spec_of(env, "/gen/bin", unset, declared)
    argv = [sys.executable, "-c", REPORT, *args]
    launched = outcome(via_launcher(tmp_path, spec, argv))
    agent = outcome(via_agent(tmp_path, spec, argv))
    assert launched == agent
    report = agent["report"]
    assert agent["code"] == 0 and report["argv"] == args and report["cwd"] == str(tmp_path)
    assert report["own_group"] and agent["said_a_group"]  # signals reach all of it
    expected_tail = "/usr/local/bin:/usr/bin:/bin" if declared is None else declared
    assert report["env"]["PATH"] == "/gen/bin" + (":" + expected_tail if expected_tail else "")
    assert all(report["env"][k] == v for k, v in env.items() if k != "PATH")
    assert not set(unset) & set(report["env"]) and report["env"]["KEEP"] == "kept"


@pytest.mark.parametrize("what", ["missing", "not executable", "no #! line"])
def test_a_command_that_cannot_start_ends_alike(tmp_path: Path, what: str) -> None:
    spec = spec_of({}, "/gen/bin", (), None)
    if what == "missing":
        argv, code, said = ["no-such-command-here"], 127, "command not found"
    elif what == "no #! line":  # ENOEXEC: executable, but nothing the kernel can run
        script = tmp_path / "plain"
        script.write_bytes(b"\x00\x01not a program\n")
        script.chmod(0o755)
        argv, code, said = [str(script)], 126, "cannot execute"
    else:
        script = tmp_path / "train.py"
        script.write_text("print('never')\n")
        argv, code, said = [str(script)], 126, "not executable"
    launched = outcome(via_launcher(tmp_path, spec, argv))
    agent = outcome(via_agent(tmp_path, spec, argv))
    assert (launched["code"], launched["stderr"]) == (agent["code"], agent["stderr"])
    assert agent["code"] == code and f"envlock: {said}: {argv[0]}" in agent["stderr"]


# -- the startup set: INSTALLER and the agent's install_startup --------------------------------
FILES = {"startup/sitecustomize.py": b"x = 1\n", "agent/core.py": b"# the agent\n"}


def encoded(files: dict[str, bytes]) -> dict[str, str]:
    return {rel: base64.b64encode(data).decode() for rel, data in files.items()}


def install_by_installer(final: Path, version: str, files: dict[str, bytes]) -> bool:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", INSTALLER, str(final), version],
        input=json.dumps(encoded(files)),
        capture_output=True,
        text=True,
    )
    return done.returncode == 0


def install_by_agent(final: Path, version: str, files: dict[str, bytes]) -> bool:
    startup = {"dir": str(final), "version": version, "files": encoded(files)}
    try:
        agent_launch.install_startup(startup)
    except Exception:  # the agent's AgentError
        return False
    return True


INSTALLERS = {"installer": install_by_installer, "agent": install_by_agent}


def tree(top: Path) -> dict[str, Any]:
    """Everything under `top`'s parent: each path, its mode and bytes (no temp dir left)."""
    return {
        str(p.relative_to(top.parent)): (
            stat.S_IMODE(p.lstat().st_mode) if p.is_file() else "dir",
            p.read_bytes() if p.is_file() else None,
        )
        for p in sorted(top.parent.rglob("*"))
    }


@pytest.mark.parametrize("case", ["fresh", "corrupted", "already there"])
def test_both_install_the_startup_set_alike(tmp_path: Path, case: str) -> None:
    version = version_of(FILES)
    seen = {}
    old = os.umask(0)  # the modes asked for show as they are
    try:
        for name, install in INSTALLERS.items():
            final = tmp_path / name / "root" / "startup" / version
            if case == "already there":
                assert install(final, version, FILES)
            sent = {**FILES, "agent/core.py": b"# changed on the way\n"}
            ok = install(final, version, sent if case == "corrupted" else FILES)
            seen[name] = (ok, tree(final))
    finally:
        os.umask(old)
    assert seen["installer"] == seen["agent"], seen
    ok, files = seen["agent"]
    assert ok == (case != "corrupted")
    if ok:
        landed = {k.split("/", 1)[1]: v for k, v in files.items() if v[0] != "dir"}
        assert landed == {**{rel: (0o644, data) for rel, data in FILES.items()},
                          ".complete": (0o644, b"")}  # fmt: skip
    else:
        assert files == {}  # nothing left: neither the set nor a temp dir
