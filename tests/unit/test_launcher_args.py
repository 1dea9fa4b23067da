"""run's remote launcher runs as root and renames its .pid into place: it takes only
`<run dir>/<token>.env` and the `.pid` beside it, so arguments out of place (a caller's
bug, a mutant dropping one) never write over another file. Once a test under mutation
testing did: the launcher, given the command's `/bin/sh` where its .pid belonged, renamed
its group id over the system's shell."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.runs.launch import LAUNCHER, spec_of


def launcher(
    env_file: Path | str, pid_file: Path | str, *argv: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", "-c", LAUNCHER, str(env_file), str(pid_file), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / "0123abcd.env"
    path.write_text(json.dumps(spec_of({}, "/nonexistent/bin", ())))
    return path


@pytest.mark.parametrize("shape", ["elsewhere", "command", "relative", "not .env"])
def test_the_launcher_refuses_a_pid_file_that_is_not_its_env_file_s_twin(
    tmp_path: Path, env_file: Path, shape: str
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    env, pid = {
        "elsewhere": (env_file, victim),
        "command": (env_file, victim),  # argv shifted: the command's path where the .pid goes
        "relative": ("run/0123abcd.env", "run/0123abcd.pid"),
        "not .env": (victim, victim.with_suffix(".pid")),
    }[shape]
    done = launcher(env, pid, "true") if shape != "command" else launcher(env, str(victim))
    assert done.returncode == 126, done.stderr
    assert "the launcher takes <run dir>/<token>.env and .pid" in done.stderr
    assert victim.read_text() == "keep me"
    assert sorted(p.name for p in env_file.parent.iterdir()) == [env_file.name]


def test_the_launcher_takes_its_twin_pair(env_file: Path) -> None:
    done = launcher(env_file, env_file.with_suffix(".pid"), "true")
    assert done.returncode == 0, done.stderr
    assert [p.name for p in env_file.parent.iterdir()] == ["0123abcd.pid"]  # env file read
