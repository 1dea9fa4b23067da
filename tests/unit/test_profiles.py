"""Profile validation: a corpus of bad profiles with their expected messages, and good ones.

Every file in tests/bad_profiles/ must fail `load_profile` with one ProfileError whose text
names the file and contains each fragment listed for it in tests/bad_profiles/expected.toml;
a representative subset also goes through the real CLI (exit 2, message on stderr, nothing
written). The good-profile tests pin defaults, path resolution and the torch pin.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.base.tomlread import Table
from envlock.errors import EXIT_USAGE, ProfileError, UsageError
from envlock.profile.read import TorchSpec, load_profile
from envlock.proxmox.api import read_secret
from envlock.proxmox.settings import LxcSettings
from envlock.targets.ssh import SshSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 only
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
BAD = Path(__file__).resolve().parents[1] / "bad_profiles"
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
    "70-torch-backend-typo.toml",
    "72-device-injection.toml",
    "75-ssh-proxycommand.toml",
    "79-host-nul.toml",
]

# The bad profile that proves each table refuses a key it does not know.
UNKNOWN_KEY_PROFILES = {
    "[profile]": "03-unknown-key.toml",
    "[target] local": "57-local-target-with-host.toml",
    "[target] ssh": "59-ssh-target-unknown-key.toml",
    "[target] proxmox-lxc": "60-lxc-target-unknown-key.toml",
    "[python]": "61-python-unknown-key.toml",
    "[torch]": "62-torch-unknown-key.toml",
    "[dependencies]": "63-dependencies-unknown-key.toml",
    "[cache]": "64-cache-unknown-key.toml",
    "[scripts]": "65-scripts-unknown-key.toml",
    "[container]": "66-container-unknown-key.toml",
    "[container] mounts": "67-mount-unknown-key.toml",
    "[run]": "68-run-unknown-key.toml",
    "[gpu]": "69-gpu-unknown-key.toml",
}

LOCAL_HEAD = """\
[profile]
name = "{name}"

[target]
type = "local"
{target}
[python]
version = "3.11"
"""


SSH_TARGET = """\
[profile]
name = "remote"

[target]
type = "ssh"
host = "gpu1"
root = "/opt/envlock"
{target}
[python]
version = "3.12"
"""

LXC_TARGET = """\
[profile]
name = "ct"

[target]
type = "proxmox-lxc"
host = "pve1"
root = "/opt/envlock"
api-url = "https://pve1.example:8006"
node = "pve1"
vmid = 101
secret-env = "PVE_TOKEN_SECRET"
{target}
[python]
version = "3.12"

[container]
ostemplate = "local:vztmpl/debian-12.tar.zst"
rootfs = "local-lvm:64"
{container}"""


def write_profile(directory: Path, body: str, *, name: str = "good", target: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(LOCAL_HEAD.format(name=name, target=target) + body)
    return path


def write_text(directory: Path, text: str) -> Path:
    path = directory / "p.toml"
    path.write_text(text)
    return path


# -- the corpus ---------------------------------------------------------------------------------


def test_corpus_and_expectations_match() -> None:
    assert len(BAD_FILES) >= 34
    assert sorted(EXPECTED) == BAD_FILES, "every bad profile needs an entry in expected.toml"
    for name, fragments in EXPECTED.items():
        assert fragments and all(isinstance(f, str) and f for f in fragments), name


@pytest.mark.parametrize("table", UNKNOWN_KEY_PROFILES)
def test_every_table_has_an_unknown_key_profile(table: str) -> None:
    fragments = EXPECTED[UNKNOWN_KEY_PROFILES[table]]
    assert "unknown key" in fragments
    assert any(f.startswith(table.split(" ")[0]) for f in fragments)


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


# -- the newer keys -----------------------------------------------------------------------------


def test_new_keys_default(tmp_path: Path) -> None:
    profile = load_profile(write_profile(tmp_path, ""))
    assert profile.python_download is False
    assert profile.pass_env == ()
    assert profile.gpu_count is None
    ssh = load_profile(write_text(tmp_path, SSH_TARGET.format(target="")))
    assert ssh.target.settings.allow_insecure_ssh is False
    lxc = load_profile(write_text(tmp_path, LXC_TARGET.format(target="", container="")))
    assert lxc.container is not None
    assert lxc.container.keep_snapshots == 5
    assert lxc.target.settings.ssh.allow_insecure_ssh is False


def test_new_keys_parsed(tmp_path: Path) -> None:
    body = (
        'download = true\n\n[run]\npass-env = ["WANDB_API_KEY", "HF_TOKEN"]\n\n[gpu]\ncount = 8\n'
    )
    profile = load_profile(write_profile(tmp_path, body))
    assert profile.python_download is True
    assert profile.pass_env == ("WANDB_API_KEY", "HF_TOKEN")
    assert profile.gpu_count == 8
    lxc = load_profile(
        write_text(tmp_path, LXC_TARGET.format(target="", container="keep-snapshots = 2\n"))
    )
    assert lxc.container is not None
    assert lxc.container.keep_snapshots == 2


def test_empty_run_table_passes_nothing(tmp_path: Path) -> None:
    assert load_profile(write_profile(tmp_path, "\n[run]\n")).pass_env == ()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("\n[gpu]\ncount = true\n", "found a boolean true"),
        ('\n[gpu]\ncount = "8"\n', 'found a string "8"'),
        ("\n[gpu]\n", "[gpu] count: missing required key"),
        ('\n[run]\npass-env = "HF_TOKEN"\n', "expected an array of strings"),
        ('\n[run]\npass-env = ["HF_TOKEN\\n"]\n', "expected an environment variable name"),
        ('\n[run]\npass-env = ["1ST"]\n', "not starting with a digit"),
        ("\n[run]\nthing = 1\n", "[run] thing: unknown key"),
        ("download = 1\n", "[python] download: expected true or false"),
        ("run = 1\n", "[python] run: unknown key"),
    ],
)
def test_new_keys_refused(tmp_path: Path, body: str, fragment: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(write_profile(tmp_path, body))
    assert fragment in str(info.value)


# -- ssh options --------------------------------------------------------------------------------

REFUSED_SSH_OPTIONS = [
    "ProxyCommand=nc %h %p",
    "proxycommand=nc %h %p",
    "LocalCommand=touch /tmp/x",
    "PermitLocalCommand=yes",
    "KnownHostsCommand=/bin/echo",
    "PKCS11Provider=/tmp/evil.so",
    "SecurityKeyProvider=/tmp/evil.so",
    "StrictHostKeyChecking=no",
    "STRICTHOSTKEYCHECKING=No",
    "StrictHostKeyChecking=off",
    'StrictHostKeyChecking="no"',
    "UserKnownHostsFile=/dev/null",
    "userknownhostsfile=none",
    "UserKnownHostsFile=~/.ssh/known_hosts /dev/null",
]


def ssh_profile(tmp_path: Path, options: list[str], extra: str = "") -> Path:
    listed = ", ".join(f"'{option}'" for option in options)
    return write_text(tmp_path, SSH_TARGET.format(target=f"ssh-options = [{listed}]\n{extra}"))


@pytest.mark.parametrize("option", REFUSED_SSH_OPTIONS)
def test_insecure_ssh_option_refused(tmp_path: Path, option: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(ssh_profile(tmp_path, ["ConnectTimeout=5", option]))
    message = str(info.value)
    assert "[target] ssh-options[1]" in message
    assert "runs no local command" in message
    assert "allow-insecure-ssh = true" in message


@pytest.mark.parametrize("option", REFUSED_SSH_OPTIONS)
def test_insecure_ssh_option_allowed_when_declared(tmp_path: Path, option: str) -> None:
    profile = load_profile(ssh_profile(tmp_path, [option], "allow-insecure-ssh = true\n"))
    assert profile.target.settings.ssh_options == (option,)
    assert profile.target.settings.allow_insecure_ssh is True


def test_insecure_ssh_option_refused_on_proxmox_node(tmp_path: Path) -> None:
    text = LXC_TARGET.format(target='ssh-options = ["ProxyCommand=nc %h %p"]\n', container="")
    with pytest.raises(ProfileError, match=r"ssh-options\[0\].*runs a local command"):
        load_profile(write_text(tmp_path, text))


def test_safe_ssh_options_kept(tmp_path: Path) -> None:
    options = [
        "ProxyJump=bastion",
        "StrictHostKeyChecking=yes",
        "StrictHostKeyChecking=accept-new",
        "UserKnownHostsFile=~/.ssh/known_hosts_gpu",
        "ConnectTimeout=10",
    ]
    settings = load_profile(ssh_profile(tmp_path, options)).target.settings
    assert isinstance(settings, SshSettings)
    assert settings.ssh_options == tuple(options)
    assert settings.transport().options == tuple(options)


# -- control characters, argv words and Proxmox property strings --------------------------------


@pytest.mark.parametrize(
    ("target", "container", "where"),
    [
        ('user = "root\\u0000"', "", "[target] user"),
        ('identity-file = "~/.ssh/id\\n"', "", "[target] identity-file"),
        ('ca-file = "ca\\u0000.pem"', "", "[target] ca-file"),
        ('secret-file = "secret\\u0000"', "", "[target] secret-file"),
        ('token-id = "envlock\\r\\nX-Evil: 1"', "", "[target] token-id"),
        ('api-user = "root@pam\\u0000"', "", "[target] api-user"),
        ('api-url = "https://pve1:8006/\\u0000"', "", "[target] api-url"),
        ('venv = "/opt/venv\\u0000"', "", "[target] venv"),
        ("", 'hostname = "ct\\nmp0: /etc"', "[container] hostname"),
        ("", 'features = ["nesting=1\\u0000"]', "[container] features[0]"),
        ("", 'net = ["name=eth0\\u2028"]', "[container] net[0]"),
        ("", 'ostemplate = "local:vztmpl/x\\u001b[2J"', "[container] ostemplate"),
        ("", 'devices = ["/dev/nvidia0\\u0000"]', "[container] devices[0]"),
    ],
)
def test_control_characters_refused(
    tmp_path: Path, target: str, container: str, where: str
) -> None:
    line = target or container
    template = re.sub(rf"(?m)^{line.split(' ')[0]} = .*\n", "", LXC_TARGET)  # no duplicate key
    text = template.format(target=target + "\n", container=container + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(write_text(tmp_path, text))
    message = str(info.value)
    assert where in message
    assert "without control characters" in message
    assert "\x00" not in message and "\n  hint" in message  # escaped, one line plus the hint


@pytest.mark.parametrize("host", ["-oProxyCommand=id", "gpu 1", "gpu1\\t", "\\u0000"])
def test_bad_host_refused(tmp_path: Path, host: str) -> None:
    text = SSH_TARGET.format(target="").replace('host = "gpu1"', f'host = "{host}"')
    with pytest.raises(ProfileError, match=r"\[target\] host"):
        load_profile(write_text(tmp_path, text))


@pytest.mark.parametrize("node", ["-pve1", "pve1/..", "pve 1", "pve1\\u0000", "", "pve1-"])
def test_bad_node_refused(tmp_path: Path, node: str) -> None:
    text = LXC_TARGET.format(target="", container="").replace('node = "pve1"', f'node = "{node}"')
    with pytest.raises(ProfileError, match=r"\[target\] node"):
        load_profile(write_text(tmp_path, text))


@pytest.mark.parametrize(
    ("container", "where", "fragment"),
    [
        ('devices = ["/dev/nvidia0,mode=0666"]', "devices[0]", "Proxmox options"),
        ('devices = ["/dev/nvidia0", "/dev/dri/../sda"]', "devices[1]", '".."'),
        ('devices = ["/dev/nvidia 0"]', "devices[0]", "whitespace"),
        ('devices = ["/dev/nvidia0=x"]', "devices[0]", "Proxmox options"),
        (
            'mounts = [{ source = "/srv/x,mp=/etc,shared=1", path = "/x" }]',
            "mounts[0].source",
            "Proxmox options",
        ),
        ('mounts = [{ source = "/srv/x", path = "/x,ro=0" }]', "mounts[0].path", "options"),
        ('mounts = [{ source = "/srv/../etc", path = "/x" }]', "mounts[0].source", '".."'),
        ('mounts = [{ source = "/srv/x", path = "/x\\u0000" }]', "mounts[0].path", "control"),
        ('mounts = [{ source = "/srv/x\\ty", path = "/x" }]', "mounts[0].source", "control"),
        ('rootfs = "local-lvm:64\\n"', "rootfs", "control"),
    ],
)
def test_proxmox_property_injection_refused(
    tmp_path: Path, container: str, where: str, fragment: str
) -> None:
    text = LXC_TARGET.format(target="", container=container + "\n")
    text = text.replace('rootfs = "local-lvm:64"\n', "") if "rootfs" in container else text
    with pytest.raises(ProfileError) as info:
        load_profile(write_text(tmp_path, text))
    message = str(info.value)
    assert f"[container] {where}" in message
    assert fragment in message


def test_safe_container_paths_kept(tmp_path: Path) -> None:
    container = (
        'devices = ["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/dri/renderD128"]\n'
        'net = ["name=eth0,bridge=vmbr0,ip=dhcp"]\nfeatures = ["nesting=1,keyctl=1"]\n'
        'mounts = [{ source = "/tank/work space.d", path = "/workspace" }]\n'
    )
    text = LXC_TARGET.format(target="", container=container)
    with pytest.raises(ProfileError, match="whitespace"):  # spaces split property strings too
        load_profile(write_text(tmp_path, text))
    ct = load_profile(write_text(tmp_path, text.replace("work space.d", "work_space.d"))).container
    assert ct is not None
    assert ct.devices == ("/dev/nvidia0", "/dev/nvidia-uvm", "/dev/dri/renderD128")
    assert ct.mounts[0].source == "/tank/work_space.d"
    assert ct.net == ("name=eth0,bridge=vmbr0,ip=dhcp",)


@pytest.mark.parametrize(
    ("line", "old", "new"),
    [
        ('name = "ok\\n"', 'name = "good"', "[profile] name"),
        ('version = "3.11\\n"', 'version = "3.11"', "[python] version"),
        ('platform = "linux\\n"', "", "[python] platform"),
    ],
)
def test_trailing_newline_not_accepted_by_patterns(
    tmp_path: Path, line: str, old: str, new: str
) -> None:
    path = write_profile(tmp_path, "")
    text = path.read_text()
    path.write_text(text.replace(old, line) if old else text + line + "\n")
    with pytest.raises(ProfileError, match=re.escape(new)):
        load_profile(path)


def test_backend_with_newline_refused(tmp_path: Path) -> None:
    path = write_profile(tmp_path, '\n[torch]\nversion = "2.11.0"\nbackend = "cu128\\n"\n')
    with pytest.raises(ProfileError, match=r"\[torch\] backend: expected cpu"):
        load_profile(path)


# -- a misspelt required key --------------------------------------------------------------------


def table(data: dict[str, object], *seen: str) -> Table:
    t = Table("p.toml", "target", data)
    t.seen.update(seen)
    return t


@pytest.mark.parametrize(
    ("data", "key", "typo"),
    [
        ({"bakend": "cu128"}, "backend", "bakend"),
        ({"backedn": "cu128"}, "backend", "backedn"),
        ({"BACKEND": "cu128"}, "backend", "BACKEND"),
        ({"api_url": "https://x"}, "api-url", "api_url"),
        ({"hots": "gpu1"}, "host", "hots"),
        ({"vmdi": 101}, "vmid", "vmdi"),
    ],
)
def test_missing_key_names_its_misspelling(data: dict[str, object], key: str, typo: str) -> None:
    with pytest.raises(ProfileError) as info:
        table(data).raw(key)
    assert (
        f"missing required key `{key}` (found unknown key `{typo}`: did you mean `{key}`?)"
        in str(info.value)
    )
    assert f"rename `{typo}` to `{key}`" in str(info.value)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"api-user": "root@pam"}, "api-url"),  # a real neighbour, read later
        ({"port": 22}, "host"),
        ({"root": "/opt"}, "node"),
    ],
)
def test_missing_key_without_a_close_unknown_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ProfileError) as info:
        table(data).raw(key)
    assert str(info.value).startswith(f"p.toml: [target] {key}: missing required key")
    assert "did you mean" not in str(info.value)


def test_missing_key_ignores_keys_already_read() -> None:
    with pytest.raises(ProfileError) as info:
        table({"bakend": "x"}, "bakend").raw("backend")
    assert "did you mean" not in str(info.value)


def test_secret_typo_named(tmp_path: Path) -> None:
    text = LXC_TARGET.format(target="", container="").replace("secret-env", "secret_env")
    with pytest.raises(ProfileError, match="found unknown key `secret_env`"):
        load_profile(write_text(tmp_path, text))


# -- the Proxmox secret file --------------------------------------------------------------------


def lxc_settings(secret_file: Path) -> LxcSettings:
    return LxcSettings(ssh=SshSettings(host="pve1"), secret_file=str(secret_file))


def test_secret_file_read(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("s3cr\u00e9t\n")
    path.chmod(0o600)
    assert read_secret(lxc_settings(path)) == "s3cr\u00e9t"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\xff\xfe\x00s\x00", "is not UTF-8 text"),
        (b"\n", "is empty"),
        (b"line one\nline two\n", "more than one line"),
        (b"abc\x00def", "control characters"),
    ],
)
def test_bad_secret_file_is_a_usage_error(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "secret"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(UsageError) as info:
        read_secret(lxc_settings(path))
    assert str(path) in str(info.value)
    assert fragment in str(info.value)
    assert info.value.exit_code == EXIT_USAGE
