"""The table of target types (targets/registry.py), walked: every row goes through what uses
it — `envlock init` (its --target choice and the row's options), the starter it writes (read
back as that type), the profile reader, the transport (built, and reached over ssh exactly
when the row says so) and the classes its transport fails with (each a TransportFailed, the
only ones code outside targets/ catches).

A further type registered in memory (podman over ssh, below: one module's worth of code and
the registry's line) goes through the same walk, with no other file edited: init offers it
with its options, the starter writes it, the reader reads it back."""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import pytest
from click.testing import CliRunner

from envlock.commands.init import command as init
from envlock.errors import OperationError, UsageError
from envlock.profile.read import load_profile
from envlock.starters.template import init_flags
from envlock.targets.base import (
    InitFlag,
    LocalPath,
    Result,
    StarterRow,
    TargetType,
    Transport,
    TransportFailed,
)
from envlock.targets.registry import TARGET_TYPES
from envlock.targets.ssh import SSH_FAILURES, SSH_FLAGS, SshSettings, read_ssh_settings

PACKAGE = Path(__file__).resolve().parents[2] / "envlock"
REGISTERED = tuple(TARGET_TYPES)


# -- a further type, in memory: what a module targets/podman.py would hold ---------------------
class PodmanFailed(TransportFailed):
    """The container is not there (podman's own refusal: the command did not start)."""


@dataclass(frozen=True)
class PodmanSettings:
    ssh: SshSettings
    container: str


class PodmanTransport:
    """Commands reach a container through ssh to its host and `podman exec`."""

    system_python = "python3"

    def __init__(self, settings: PodmanSettings) -> None:
        self.node = settings.ssh.transport()
        self.container = settings.container
        self.name = f"container {settings.container} on {self.node.host}"

    def wrap(self, argv: list[str]) -> list[str]:
        return ["podman", "exec", "-i", self.container, *argv]

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        result = self.node.run(self.wrap(argv), stdin=stdin, on_stderr_line=on_stderr_line)
        if "No such container" in result.error_text():
            raise PodmanFailed(f"{self.name} does not exist")
        return Result(tuple(argv), result.exit_code, result.stdout, result.stderr)

    def command_line(self, argv: list[str]) -> list[str] | None:
        return self.node.command_line(self.wrap(argv))

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        return self.node.spawn(self.wrap(argv), piped=piped)


def read_podman_settings(t: Any, local_path: LocalPath) -> PodmanSettings:
    return PodmanSettings(read_ssh_settings(t, local_path), t.text("container-name"))


PODMAN = TargetType(
    name="podman",
    remote=True,
    read_settings=read_podman_settings,
    transport=PodmanTransport,
    starter=StarterRow(
        "# Where: a podman container on a host reached over ssh.",
        root="/opt/envlock",
        venv="/opt/venv",
        flags=(
            *SSH_FLAGS,
            InitFlag("--container-name", "container-name", "its name.", example="c"),
        ),
        required=("host", "container-name"),
    ),
    over_ssh=True,
    failures=(*SSH_FAILURES, PodmanFailed),
)


@pytest.fixture
def with_podman(monkeypatch: pytest.MonkeyPatch) -> Mapping[str, TargetType]:
    """The registry with a further type's line added (for this test only)."""
    monkeypatch.setitem(TARGET_TYPES, PODMAN.name, PODMAN)
    return TARGET_TYPES


# -- the walk -----------------------------------------------------------------------------
def options_of(command: click.Command) -> dict[str, click.Option]:
    """The options click offers now (help, parsing), the registry's as it is."""
    return {
        name: param
        for param in command.get_params(click.Context(command))
        if isinstance(param, click.Option)
        for name in param.opts
    }


def needed(row: StarterRow, but: InitFlag | None = None) -> list[str]:
    """init's arguments for the flags a row cannot do without (`but` one), from their
    examples."""
    needs = [f for f in row.flags if f.key in row.required and f is not but]
    return [word for flag in needs for word in (flag.option, flag.example)]


def walk(name: str, tmp_path: Path) -> None:
    kind = TARGET_TYPES[name]
    row = kind.starter
    options = options_of(init)

    # init offers the type and every option of its row, the help naming the type.
    target_choice = options["--target"].type
    assert isinstance(target_choice, click.Choice) and name in target_choice.choices
    for flag in row.flags:
        assert name in str(options[flag.option].help).split(":")[0].split(" / "), flag.option

    # The starter it writes reads back as this type, with the row's paths.
    profile = tmp_path / f"{name}.toml"
    made = CliRunner().invoke(init, [str(profile), "--target", name, *needed(row)])
    assert made.exit_code == 0, (made.output, made.exception)
    target = load_profile(profile).target
    assert target.kind is kind and target.type == name and target.remote == kind.remote
    if kind.remote:
        assert (target.root, target.venv) == (row.root, row.venv)

    # What it needs is asked for by name; what goes with ssh alone is refused elsewhere.
    for flag in (f for f in row.flags if f.key in row.required):
        without = [str(tmp_path / "x.toml"), "--target", name, *needed(row, but=flag)]
        refused = CliRunner().invoke(init, without)
        assert isinstance(refused.exception, UsageError)
        assert f"--target {name} needs {flag.option}" in refused.exception.message
    ssh_own = [flag for flag, _ in init_flags(TARGET_TYPES) if flag.over_ssh]
    assert kind.over_ssh == (set(ssh_own) <= set(row.flags)), name
    keyed = CliRunner().invoke(
        init, [str(tmp_path / "k.toml"), "--target", name, *needed(row), "--identity-file", "k"]
    )
    assert (keyed.exit_code == 0) == kind.over_ssh, keyed.output

    # Its transport is built from the settings read, and is reached over ssh exactly when
    # the row says so (the local command line it starts is an ssh client's).
    transport: Transport = target.transport()
    assert isinstance(transport.name, str) and isinstance(transport.system_python, str)
    assert callable(transport.run) and callable(transport.spawn)
    line = getattr(transport, "command_line", None)
    assert line is not None, f"{name}: its transport names the command line it starts"
    assert (line(["true"])[0] == "ssh") == kind.over_ssh, name

    # It fails with TransportFailed's own: what agentcall and the fleet catch.
    assert kind.failures, f"{name}: list the classes its transport raises"
    for failure in kind.failures:
        assert issubclass(failure, TransportFailed), failure


@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_type_goes_through_what_uses_it(name: str, tmp_path: Path) -> None:
    walk(name, tmp_path)


def test_a_further_type_is_one_row_init_the_starter_and_the_walk_pick_it_up(
    with_podman: Mapping[str, TargetType], tmp_path: Path
) -> None:
    """No other file edited: init (the real command), the starter, the reader and the walk
    read the registry, and the registry has the further type's line."""
    assert list(with_podman) == [*REGISTERED, "podman"]
    for name in with_podman:
        (tmp_path / name).mkdir()
        walk(name, tmp_path / name)
    # init's help now offers it, and names it beside the others that take ssh's options.
    options = options_of(init)
    assert options["--container-name"].help == "podman: its name."
    assert options["--host"].help == "ssh / proxmox-lxc / podman: the host (or node) to ssh to."
    text = (tmp_path / "podman" / "podman.toml").read_text()
    assert "# Where: a podman container on a host reached over ssh." in text
    assert 'container-name = "c"' in text and 'host = "pve1"' in text


def test_the_rows_share_a_flag_only_as_one_option() -> None:
    """Two types that take `--host` take the same one: one key, one help, one kind; and a
    row needs only flags it has."""
    by_option: dict[str, InitFlag] = {}
    by_key: dict[str, InitFlag] = {}
    for kind in TARGET_TYPES.values():
        for flag in kind.starter.flags:
            assert by_option.setdefault(flag.option, flag) == flag, flag.option
            assert by_key.setdefault(flag.key, flag) == flag, flag.key
        assert set(kind.starter.required) <= {f.key for f in kind.starter.flags}, kind.name


def test_every_failure_a_transport_raises_is_a_transport_failed() -> None:
    """The exception classes of targets/ are TransportFailed's (a command's own non-zero exit,
    CommandFailed, aside), and every one is listed by the types whose transport raises it."""
    listed = {failure for kind in TARGET_TYPES.values() for failure in kind.failures}
    for path in sorted((PACKAGE / "targets").glob("*.py")):
        module = "envlock.targets." + path.stem
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            found = getattr(__import__(module, fromlist=[node.name]), node.name)
            if not (isinstance(found, type) and issubclass(found, OperationError)):
                continue
            if node.name in ("CommandFailed", "TransportFailed", "ConnectionLost", "NotRunning"):
                continue  # a command's own failure; the base classes callers catch
            assert issubclass(found, TransportFailed), f"{module}.{node.name}"
            assert found in listed, f"{module}.{node.name} is in no type's failures"


# Outside targets/, a transport's own module is named by nobody: callers use the base
# classes (targets/base.py) and the registry. proxmox/ is the proxmox-lxc type's own
# settings and API (its ssh settings are ssh's); docker/ the docker type's lifecycle.
TRANSPORT_MODULES = (
    "envlock.targets.ssh",
    "envlock.targets.pct",
    "envlock.targets.lxc",
    "envlock.targets.docker",
)
OWN_PACKAGES = ("targets", "proxmox", "docker")


def test_nothing_outside_targets_names_a_transport_s_errors_or_classes() -> None:
    named = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in OWN_PACKAGES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in TRANSPORT_MODULES:
                named.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module}")
            if isinstance(node, ast.Import):
                named += [
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {alias.name}"
                    for alias in node.names
                    if alias.name in TRANSPORT_MODULES
                ]
    assert named == []


# -- the local type's default root: one rule ----------------------------------------------
@pytest.mark.parametrize("root", [None, "root", "./a/../root", "~/envs/t", "/srv/envs/t"])
def test_the_probe_started_ahead_and_the_reader_agree_on_a_local_root(
    root: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """commands/ahead.py reads [target] root before the profile's code loads; the root it
    starts the probe in is the reader's, default included (targets/local_paths.py)."""
    from envlock.base import started
    from envlock.commands import ahead

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    profile = tmp_path / "proj" / "t.toml"
    profile.parent.mkdir()
    root_line = "" if root is None else f'root = "{root}"\n'
    profile.write_text(
        f'[profile]\nname = "t"\n[target]\ntype = "local"\n{root_line}'
        '[python]\nversion = "3.11"\n[dependencies]\npackages = []\n'
    )
    argvs: list[list[str]] = []
    monkeypatch.setattr(started, "start", lambda argv, stdin, **_: argvs.append(argv))
    ahead.start_interpreter(str(profile))
    assert [argv[4] for argv in argvs] == [load_profile(profile).target.root]


def test_the_default_local_root_is_written_once() -> None:
    holders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if ".local/share/envlock" in path.read_text()
    ]
    assert holders == ["targets/local_paths.py"]


# -- what only a profile that declares its container can do -----------------------------------
def test_the_container_refusals_name_every_type_that_declares_one() -> None:
    """`--restart` and `--container` are refused naming every type of the table whose
    profile may declare its container, with that table's name: none left out."""
    from envlock.targets.registry import needs_a_container

    said = needs_a_container("--container").message
    declaring = [kind for kind in TARGET_TYPES.values() if kind.provisioner is not None]
    assert {kind.name for kind in declaring} >= {"proxmox-lxc", "docker"}
    for kind in declaring:
        assert f"{kind.name} with a [{kind.container_table}] table" in said, said
    for kind in TARGET_TYPES.values():
        if kind.provisioner is None:
            assert f"{kind.name} with" not in said, said


def test_envlock_s_oldest_snapshots_beyond_keep_are_pruned_oldest_first() -> None:
    """One pruning for Proxmox snapshots and Docker commits: the oldest beyond the newest
    `keep`, each said (with the key that bounds them) before it goes."""
    from envlock.targets.base import prune_oldest

    said: list[str] = []
    gone: list[str] = []
    prune_oldest(
        ["a", "b", "c", "d"],
        2,
        key="keep-commits",
        say=said.append,
        describe=lambda name: f"removing image {name}",
        remove=gone.append,
    )
    assert gone == ["a", "b"]
    assert said == ["removing image a (keep-commits = 2)", "removing image b (keep-commits = 2)"]
    prune_oldest(["a"], 3, key="k", say=said.append, describe=str, remove=gone.append)
    assert gone == ["a", "b"]
