"""The interpreter guarantee cannot be configured away: under `envlock run`, `python3` is the
generation's whatever [env] says. An [env] PATH comes after the generation's bin (locally and
on an ssh target, where the launcher composes PATH), an [env] PYTHONPATH after envlock's
startup files, and the variables that would choose another interpreter are refused.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envlock.errors import EXIT_USAGE, ProfileError
from envlock.profile.read import load_profile
from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, ssh_target, write_profile

# The line many GPU profiles carry; it names no venv.
CUDA_PATH = "/usr/local/cuda/bin:/usr/bin:/bin"
# What the command reports: its interpreter, PATH and import path.
SHOW = (
    "import json, os, sys; print(json.dumps({'prefix': sys.prefix, "
    "'path': os.environ['PATH'], 'pythonpath': os.environ['PYTHONPATH'], 'sys_path': sys.path}))"
)


def shown(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    seen: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def test_env_path_and_pythonpath_come_after_the_generations(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    extra = tmp_path / "my libs"
    extra.mkdir()
    (extra / "mylib.py").write_text("WHERE = 'mylib'\n")
    profile = write_seed_project(
        tmp_path / "proj", wheelhouse, env={"PATH": CUDA_PATH, "PYTHONPATH": str(extra)}
    )
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    root = load_profile(profile).target.root
    seen = shown(envlock("run", profile, "--", "python3", "-c", SHOW))
    gen = str(seen["prefix"])
    assert gen.startswith(f"{root}/generations/1-")  # the generation's Python, not /usr/bin's
    assert seen["path"] == f"{gen}/bin:{CUDA_PATH}"
    # envlock's startup files stay first; the profile's directory is joined after them.
    own, _, theirs = str(seen["pythonpath"]).rpartition(":")
    assert theirs == str(extra) and own.endswith("envlock_api")
    sys_path = [str(p) for p in seen["sys_path"]]  # type: ignore[attr-defined]
    assert sys_path.index(str(extra)) > sys_path.index(own.split(":")[0])
    # Both are usable: the startup API and the profile's module import in one process.
    both = envlock(
        "run", profile, "--", "python3", "-c", "import envlock, mylib; print(mylib.WHERE)"
    )
    assert both.returncode == 0 and both.stdout.strip() == "mylib", both.stderr


def test_env_path_on_an_ssh_target_comes_after_the_generations_bin(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    root = tmp_path / "ssh root"
    target = ssh_target(root, tmp_path / "venv", node_sshd)
    profile = write_profile(tmp_path / "p", wheelhouse, target, env={"PATH": CUDA_PATH})
    assert cli("apply", "-y", profile).returncode == 0
    seen = shown(cli("run", profile, "--", "python3", "-c", SHOW))
    gen = str(seen["prefix"])
    assert gen.startswith(f"{root}/generations/1-")
    assert seen["path"] == f"{gen}/bin:{CUDA_PATH}"


BASE = (
    '[profile]\nname = "p"\n\n[target]\ntype = "local"\nroot = "root"\n\n'
    '[python]\nversion = "3.11"\n'
)


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        (
            '[env]\nVIRTUAL_ENV = "/opt/other"\n',
            ["[env] VIRTUAL_ENV", "sets VIRTUAL_ENV to the active generation", "its own profile"],
        ),
        (
            '[env]\nPYTHONHOME = "/usr"\n',
            ["[env] PYTHONHOME", "another standard library", "set PYTHONPATH in [env]"],
        ),
        (
            '[run]\npass-env = ["HF_TOKEN", "PATH"]\n',
            ["[run] pass-env[1]", "composes PATH", "set PATH in [env]"],
        ),
        (
            '[run]\npass-env = ["PYTHONPATH"]\n',
            ["[run] pass-env[0]", "composes PYTHONPATH", "set PYTHONPATH in [env]"],
        ),
        ('[run]\npass-env = ["VIRTUAL_ENV"]\n', ["[run] pass-env[0]", "active generation"]),
        ('[run]\npass-env = ["PYTHONHOME"]\n', ["[run] pass-env[0]", "standard library"]),
    ],
)
def test_variables_that_choose_the_interpreter_are_refused(
    tmp_path: Path, body: str, fragments: list[str]
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(BASE + "\n" + body)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert str(path) in str(info.value)


def test_the_cli_refuses_them_with_exit_2_and_writes_nothing(
    tmp_path: Path, envlock: Envlock
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(BASE + '\n[env]\nPYTHONHOME = "/usr"\n')
    result = envlock("lock", path)
    assert result.returncode == EXIT_USAGE
    assert "[env] PYTHONHOME" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]
    # `run --env` follows the rule of [run] pass-env, before it checks anything.
    path.write_text(BASE)
    passed = envlock("run", "--env", "PATH", path, "--", "true")
    assert passed.returncode == EXIT_USAGE, passed.stderr
    assert "--env PATH" in passed.stderr and "set PATH in [env]" in passed.stderr
