"""Profile validation: a corpus of bad profiles with their expected messages, and good ones.

Every file in tests/bad_profiles/ must fail `load_profile` with one ProfileError whose text
names the file and contains each fragment listed for it in tests/bad_profiles/expected.toml;
a representative subset also goes through the real CLI (exit 2, message on stderr, nothing
written). The good-profile tests pin defaults, path resolution and the torch pin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.errors import EXIT_USAGE, ProfileError
from envlock.profile import TorchSpec, load_profile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 only
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
BAD = Path(__file__).resolve().parent / "bad_profiles"
EXPECTED: dict[str, list[str]] = tomllib.loads((BAD / "expected.toml").read_text())
BAD_FILES = sorted(p.name for p in BAD.glob("*.toml") if p.name != "expected.toml")
GOOD_FILES = sorted(
    p for p in (REPO / "profiles").glob("*.toml") if not p.name.startswith("pylock.")
)

# Run through the CLI: one of each family of failure (syntax, tables, keys, types, targets,
# torch, dependencies, container, env, scripts).
CLI_SUBSET = [
    "01-toml-syntax.toml",
    "02-unknown-table.toml",
    "03-unknown-key.toml",
    "04-port-string.toml",
    "08-missing-profile.toml",
    "11-name-dots.toml",
    "19-lxc-no-secret.toml",
    "22-venv-in-generations.toml",
    "23-bad-specifier.toml",
    "25-unknown-backend.toml",
    "31-mount-relative.toml",
    "33-env-not-string.toml",
    "36-deps-conflict-torch-pin.toml",
    "43-scripts-glob-no-match.toml",
]

LOCAL_HEAD = """\
[profile]
name = "{name}"

[target]
type = "local"
{target}
[python]
version = "3.11"
"""


def write_profile(directory: Path, body: str, *, name: str = "good", target: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(LOCAL_HEAD.format(name=name, target=target) + body)
    return path


# -- the corpus ---------------------------------------------------------------------------------


def test_corpus_and_expectations_match() -> None:
    assert len(BAD_FILES) >= 34
    assert sorted(EXPECTED) == BAD_FILES, "every bad profile needs an entry in expected.toml"
    for name, fragments in EXPECTED.items():
        assert fragments and all(isinstance(f, str) and f for f in fragments), name


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_profile_message(name: str) -> None:
    path = BAD / name
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    missing = [f for f in EXPECTED[name] if f not in message]
    assert not missing, f"{name}: {missing} not in:\n{message}"
    assert "Traceback" not in message
    assert info.value.exit_code == EXIT_USAGE


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "400"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "envlock", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("command", "name"),
    [("lock", n) for n in CLI_SUBSET]
    + [("plan", "14-unknown-target-type.toml"), ("plan", "27-label-contradicts-backend.toml")],
)
def test_bad_profile_cli(tmp_path: Path, command: str, name: str) -> None:
    profile_dir = tmp_path / "profiles"
    profile_dir.mkdir()
    copy = profile_dir / name
    shutil.copyfile(BAD / name, copy)
    before = sorted(p.name for p in profile_dir.iterdir())

    result = run_cli(command, str(copy), cwd=tmp_path)

    assert result.returncode == EXIT_USAGE, result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert str(copy) in result.stderr
    missing = [f for f in EXPECTED[name] if f not in result.stderr]
    assert not missing, f"{name}: {missing} not on stderr:\n{result.stderr}"
    assert sorted(p.name for p in profile_dir.iterdir()) == before
    assert not list(tmp_path.rglob("pylock.*"))


# -- good profiles ------------------------------------------------------------------------------


def test_shipped_profiles_exist() -> None:
    assert GOOD_FILES, "profiles/ has no profile"


@pytest.mark.parametrize("path", GOOD_FILES, ids=lambda p: p.name)
def test_shipped_profile_loads(path: Path) -> None:
    profile = load_profile(path)
    assert profile.path == path.resolve()
    assert profile.lock_path == path.resolve().parent / f"pylock.{profile.name}.toml"
    assert profile.sha256 and len(profile.sha256) == 64


def test_local_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    profile = load_profile(write_profile(tmp_path / "p", "", name="demo"))
    root = home / ".local/share/envlock/demo"
    assert profile.target.type == "local"
    assert profile.target.root == str(root)
    assert profile.target.venv == str(root / "venv")
    assert profile.cache_dir == str(root / "cache")
    assert profile.description == ""
    assert profile.torch is None
    assert profile.env == {}
    assert profile.scripts is None
    assert profile.container is None


def test_local_relative_paths_from_profile_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # must not matter: paths are taken from the profile's dir
    path = write_profile(
        tmp_path / "conf" / "profiles",
        '\n[cache]\ndir = "cache-here"\n',
        target='root = "../envs/good"\nvenv = "./venvs/good"\n',
    )
    profile = load_profile(path)
    base = (tmp_path / "conf" / "profiles").resolve()
    assert profile.target.root == str(base.parent / "envs" / "good")
    assert profile.target.venv == str(base / "venvs" / "good")
    assert profile.cache_dir == str(base / "cache-here")


def test_local_root_relative_defaults_follow_root(tmp_path: Path) -> None:
    path = write_profile(tmp_path / "p", "", target='root = "../env"\n')
    profile = load_profile(path)
    assert profile.target.root == str(tmp_path.resolve() / "env")
    assert profile.target.venv == str(tmp_path.resolve() / "env" / "venv")
    assert profile.cache_dir == str(tmp_path.resolve() / "env" / "cache")


def test_remote_defaults_under_root(tmp_path: Path) -> None:
    path = tmp_path / "remote.toml"
    path.write_text(
        '[profile]\nname = "remote"\n\n[target]\ntype = "ssh"\nhost = "gpu1"\n'
        'root = "/opt/envlock/remote"\n\n[python]\nversion = "3.12"\n'
    )
    profile = load_profile(path)
    assert profile.target.settings.host == "gpu1"
    assert profile.target.venv == "/opt/envlock/remote/venv"
    assert profile.cache_dir == "/opt/envlock/remote/cache"
    assert profile.python_platform == "x86_64-manylinux_2_28"


@pytest.mark.parametrize(
    ("version", "backend", "pinned"),
    [
        ("2.11.0", "cu128", "2.11.0+cu128"),
        ("2.11.0", "cu130", "2.11.0+cu130"),
        ("2.11.0", "cpu", "2.11.0+cpu"),
        ("2.9.0", "rocm6.4", "2.9.0+rocm6.4"),
        ("2.11.0+cu128", "cu128", "2.11.0+cu128"),
        ("2.11.0", "pypi", "2.11.0"),
    ],
)
def test_torch_pinned_version(version: str, backend: str, pinned: str) -> None:
    spec = TorchSpec(version=version, backend=backend)
    assert spec.pinned_version == pinned
    assert spec.requirements()[0] == f"torch=={pinned}"


def test_torch_pin_through_profile(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path,
        '\n[torch]\nversion = "2.11.0"\nbackend = "cu128"\npackages = ["torchvision==0.26.0"]\n'
        '\n[dependencies]\npackages = ["torch>=2.10", "numpy>=1.26"]\n',
    )
    # "torch>=2.10" agrees with the pin but still repeats it: [torch] alone decides torch.
    with pytest.raises(ProfileError, match="torch is pinned by"):
        load_profile(path)
    path.write_text(path.read_text().replace('"torch>=2.10", ', ""))
    torch = load_profile(path).torch
    assert torch is not None
    assert torch.pinned_version == "2.11.0+cu128"
    assert torch.backend_index == "https://download.pytorch.org/whl/cu128"
    assert torch.requirements() == ["torch==2.11.0+cu128", "torchvision==0.26.0"]


def test_pypi_backend_has_no_label_or_index(tmp_path: Path) -> None:
    path = write_profile(tmp_path, '\n[torch]\nversion = "2.11.0"\nbackend = "pypi"\n')
    torch = load_profile(path).torch
    assert torch is not None
    assert torch.local_label is None
    assert torch.pinned_version == "2.11.0"
    assert torch.backend_index is None


def test_profile_without_torch_is_valid(tmp_path: Path) -> None:
    path = write_profile(tmp_path, '\n[dependencies]\npackages = ["numpy>=1.26", "torch"]\n')
    profile = load_profile(path)
    assert profile.torch is None
    assert profile.dependencies.packages == ("numpy>=1.26", "torch")


def test_env_values_kept_literally(tmp_path: Path) -> None:
    values = {
        "WITH_SPACES": "a b  c",
        "QUOTES": "say \"hi\" and 'bye'",
        "SUBSHELL": "$(rm -rf /)",
        "BACKTICKS": "`id`",
        "SEMICOLON": "a; echo pwned",
        "DOLLAR": "$HOME/${USER}",
        "EMPTY": "",
    }
    body = "\n[env]\n" + "".join(
        f"{key} = '''{value}'''\n" if '"' in value else f'{key} = "{value}"\n'
        for key, value in values.items()
    )
    profile = load_profile(write_profile(tmp_path, body))
    assert profile.env == values
