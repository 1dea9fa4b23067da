"""The hot path loads only what it uses: a local single-target `check` or `run` imports no
Proxmox, fleet, rich-table, lock-resolution or requirement-parser code (issue "Speed").

Measured in real processes on a real applied environment: the CLI runs in a subprocess whose
wrapper reports `sys.modules` when envlock exits, or where `run` would exec its command (the
command itself is then not started: what it would have paid is envlock's alone). The profile's
requirement lists are parsed once per distinct list (envlock/profile/verdict.py), and its lock
validated once per distinct text (envlock/lock/verdict.py): the first command after a change
pays for the parser and the validator, the next ones read the verdicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlock.profile import verdict as profile_cache
from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.remote.fixtures import Node

# Everything a local single-target check or run must not load (module names, or a package
# and everything under it when the name ends with ".").
NOT_ON_THE_HOT_PATH = (
    "envlock.converge.fleet",
    "envlock.proxmox.",
    "proxmoxer",
    # The docker type's lifecycle and the Docker SDK: only a profile with [docker] loads them.
    "envlock.docker.",
    "docker",
    "docker.",
    "requests",
    "rich.table",
    "envlock.lock.resolve",
    "envlock.lock.links",
    "envlock.lock.sources",
    "envlock.lock.indexes",
    "packaging.requirements",
    "packaging.markers",
    "packaging.specifiers",
    # The lock's validator and the wheel-tag code it reads file names with: the verdict on
    # the lock's very bytes is kept (envlock/lock/verdict.py).
    "envlock.lock.schema",
    "packaging.tags",
    "packaging.utils",
    "secrets",
    "random",
    # The trainer callbacks and their frameworks: only a training script imports them.
    "envlock.integrations",
    "envlock.integrations.",
    "torch",
    "transformers",
    "lightning",
    "accelerate",
)
REQUIREMENT_PARSER = "packaging.requirements"

# The CLI as a user runs it; `run`'s exec is where envlock's own work ends, so it reports there.
WRAPPER = """
import json, os, subprocess, sys
out = sys.argv.pop(1)
spawned = []  # each process envlock starts: whether a probe; were click, the profile's code loaded
class Popen(subprocess.Popen):
    def __init__(self, args, *rest, **options):
        probe = str(list(args)[-1]).endswith("probe")
        spawned.append([probe, "click" in sys.modules, "envlock.profile.read" in sys.modules])
        super().__init__(args, *rest, **options)
subprocess.Popen = Popen
def report(code):
    with open(out, "w") as handle:
        json.dump({"code": code, "modules": sorted(sys.modules), "spawned": spawned}, handle)
def execvpe(file, args, env):
    report("exec " + file)
    os._exit(0)
os.execvpe = execvpe
sys.argv[0] = "envlock"
from envlock.cli import main
try:
    main()
except SystemExit as exc:
    report(exc.code)
    raise
"""


def loaded(tmp_path: Path, cache: Path, *args: str | Path) -> tuple[object, list[str]]:
    """(how the CLI ended, the modules it had loaded) for `envlock ARGS`."""
    data = reported(tmp_path, cache, *args)
    return data["code"], data["modules"]


def reported(tmp_path: Path, cache: Path, *args: str | Path) -> dict[str, Any]:
    """What the wrapper reported of `envlock ARGS`: code, modules, spawned."""
    out = tmp_path / "modules.json"
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(out), *map(str, args)],
        capture_output=True,
        text=True,
        env={**plain_environ(), "XDG_CACHE_HOME": str(cache)},
    )
    assert out.exists(), proc.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return {**data, "stderr": proc.stderr}


def plain_environ() -> dict[str, str]:
    """This environment without what makes rich colour a pipe (the CLI's stdout is one)."""
    return {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}


def rich_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] == "rich"]


def forbidden(modules: list[str]) -> list[str]:
    return [
        m
        for m in modules
        if any(m == f or (f.endswith(".") and m.startswith(f)) for f in NOT_ON_THE_HOT_PATH)
        or m.startswith("proxmoxer.")
    ]


@pytest.fixture
def applied(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    return profile


def test_check_and_run_of_one_local_target_load_only_what_they_use(
    applied: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "user-cache"
    # The first command after a change to the profile's requirements pays for the parser…
    code, first = loaded(tmp_path, cache, "check", applied)
    assert code == 0
    assert REQUIREMENT_PARSER in first and "envlock.lock.schema" in first
    assert list((cache / "envlock" / "requirements").glob("*.json"))
    assert list((cache / "envlock" / "locks").glob("*.json"))
    # …the next ones do not, and nothing of Proxmox, fleets, tables or resolution loads.
    code, check = loaded(tmp_path, cache, "check", applied)
    assert code == 0
    assert forbidden(check) == []
    # Output to a pipe: the success path prints plain lines, rich is never loaded.
    assert rich_modules(check) == []
    code, run = loaded(tmp_path, cache, "run", applied, "--", "python", "-c", "pass")
    assert code == "exec python"
    assert forbidden(run) == []
    assert "envlock.commands.run" in run and "envlock.runs.launch" in run
    assert rich_modules(run) == []


def test_a_local_check_run_or_rollback_starts_its_probe_before_click_loads(
    applied: Path, tmp_path: Path, envlock: Envlock
) -> None:
    """The probe of a local check, run, rollback or apply starts once, before click and the
    command's modules load (commands/ahead.py): its interpreter even before the profile's
    code loads, given its request once the profile and lock are read; the command adopts
    that very process."""
    cache = tmp_path / "user-cache"
    for args, code in (
        (("check", applied), 0),
        (("check", "--deep", applied), 0),
        (("-v", "check", "--json", applied), 0),
        (("run", applied, "--", "python", "-c", "pass"), "exec python"),
        (("apply", "-y", applied), 0),  # nothing to do: its one probe
    ):
        data = reported(tmp_path, cache, *args)
        assert data["code"] == code, args
        # One probe, started before click and even the profile's code loaded.
        assert data["spawned"] == [[True, False, False]], args
    # rollback: its probe and its switch (the agent's apply, waiting for the plan).
    ahead = [[True, False, False], [False, False, True]]
    data = reported(tmp_path, cache, "rollback", "--to", "1", applied)
    assert data["code"] == 0 and data["spawned"] == ahead  # nothing to do: never asked
    text = applied.read_text()
    assert '"tinydep==1.0"' in text
    applied.write_text(text.replace('"tinydep==1.0"', '"tinydep==0.9"'))  # another lock
    assert envlock("lock", applied).returncode == 0
    assert envlock("apply", "-y", applied).returncode == 0
    for number in (1, 2):
        data = reported(tmp_path, cache, "rollback", "--to", str(number), applied)
        assert data["code"] == 0 and data["spawned"] == ahead, data["stderr"]
        current = (applied.parent / "root" / "current").resolve().name
        assert current.startswith(f"{number}-")
    # A request the command does not make ahead (a snapshot asks for more): started after.
    data = reported(tmp_path, cache, "run", "--snapshot-into", tmp_path / "s", applied, "--", "x")
    assert data["code"] == "exec x"
    assert [spawn for spawn in data["spawned"] if spawn[0]] == [[True, True, True]]
    # A usage error is still click's: the probe started ahead is not waited for.
    data = reported(tmp_path, cache, "check", "--bogus", applied)
    assert data["code"] == 2


def test_an_ssh_targets_check_starts_its_probe_ahead_too(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    """Over ssh the probe's connection starts ahead as well, once: the check adopts it."""
    from tests.remote.test_remote import ssh_target, write_profile

    target = ssh_target(tmp_path / "root", tmp_path / "venv", node_sshd)
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    data = reported(tmp_path, tmp_path / "user-cache", "check", "--json", profile)
    assert data["code"] == 1, data["stderr"]  # nothing applied there yet: drift, said
    assert data["spawned"] == [[True, False, True]]  # once the profile said where


def test_a_remote_runs_one_agent_call_starts_ahead_and_is_adopted(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    """A remote `run` checks and starts in one agent call: its connection and agent start
    once the profile says where, before click loads, and wait for the request; the run
    adopts that very process (one ssh in all). A terminal or a mega-cache makes it run
    otherwise: then nothing starts ahead."""
    from tests.remote.test_remote import ssh_target, write_profile

    target = ssh_target(tmp_path / "root", tmp_path / "venv", node_sshd)
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    env = {**plain_environ(), "XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    for step in ("lock", "apply"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "envlock",
                step,
                *(["-y"] if step == "apply" else []),
                str(profile),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr
    cache = tmp_path / "user-cache"
    args = ("run", profile, "--", "python", "-c", "pass")
    reported(tmp_path, cache, *args)  # the first run probes first: the state to propose
    data = reported(tmp_path, cache, *args)
    assert data["code"] == 0, data["stderr"]
    # One process: the agent call, started once the profile was read and before click
    # loaded (started.py's Popen, not the transport's), and adopted by the run.
    assert data["spawned"] == [[False, False, True]], data["stderr"]
    data = reported(tmp_path, cache, "run", "--compile-artifacts", profile, profile, "--", "true")
    assert [s for s in data["spawned"] if not s[1]] == []  # nothing before click


def test_a_process_started_ahead_is_adopted_only_for_the_same_argv_and_request() -> None:
    from envlock.base import started
    from envlock.targets.local import LocalTransport

    program = "import os, sys; sys.stdout.write(sys.stdin.read() + str(os.getpid()))"
    argv = [sys.executable, "-c", program]
    ahead = started.start(argv, b"asked ahead ")
    transport = LocalTransport()
    # Another request, or another command line: a process of its own.
    assert transport.run(argv, stdin=b"asked now ").text() != f"asked now {ahead.pid}"
    other = transport.run([*argv, "x"], stdin=b"asked ahead ").text()
    assert other.startswith("asked ahead ") and other != f"asked ahead {ahead.pid}"
    # The same: the one started ahead (its request written then), adopted once.
    assert transport.run(argv, stdin=b"asked ahead ").text() == f"asked ahead {ahead.pid}"
    again = transport.run(argv, stdin=b"asked ahead ").text()
    assert again.startswith("asked ahead ") and again != f"asked ahead {ahead.pid}"


def test_a_changed_requirement_is_parsed_again_and_refused(
    applied: Path, tmp_path: Path, envlock: Envlock
) -> None:
    cache = tmp_path / "user-cache"
    assert loaded(tmp_path, cache, "check", applied)[0] == 0  # the verdict is kept
    text = applied.read_text()
    applied.write_text(text.replace('"trainutil"', '"trainutil", "bad name==1"'))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    refused = subprocess.run(
        [sys.executable, "-m", "envlock", "check", str(applied)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode == 2
    assert "invalid requirement" in refused.stderr and "bad name==1" in refused.stderr


TEXTS = ["numpy>=1.26", "Six"]
NAMES = [("numpy", "numpy"), ("Six", "six")]


def test_the_kept_verdict_is_read_only_when_it_is_this_users_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert profile_cache.cached_names(TEXTS) is None
    profile_cache.remember_names(TEXTS, NAMES)
    assert profile_cache.cached_names(TEXTS) == NAMES
    path = Path(str(profile_cache.entry_path(TEXTS)))
    assert path.stat().st_mode & 0o777 == 0o600
    # Its directory and envlock's own under the cache home are private, both of them.
    assert [d.stat().st_mode & 0o777 for d in (path.parent, path.parent.parent)] == [0o700] * 2
    # Another list (even one text more) is another entry: a miss.
    assert profile_cache.cached_names([*TEXTS, "torch"]) is None
    # A file others may write (or in a directory they may) is not trusted: a miss.
    path.chmod(0o666)
    assert profile_cache.cached_names(TEXTS) is None
    path.chmod(0o600)
    path.parent.chmod(0o777)
    assert profile_cache.cached_names(TEXTS) is None
    path.parent.chmod(0o700)
    assert profile_cache.cached_names(TEXTS) == NAMES
    # A link in its place is not followed.
    path.unlink()
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"schema": 1, "texts": TEXTS, "names": [["x", "x"]] * 2}))
    path.symlink_to(target)
    assert profile_cache.cached_names(TEXTS) is None


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"schema": 2, "texts": TEXTS, "names": [list(n) for n in NAMES]},
        {"schema": 1, "texts": ["numpy>=1.26", "six"], "names": [list(n) for n in NAMES]},
        {"schema": 1, "texts": TEXTS, "names": [["numpy", "numpy"]]},
        {"schema": 1, "texts": TEXTS, "names": [["numpy", "numpy"], ["six", 6]]},
        {"schema": 1, "texts": TEXTS, "names": [["numpy", "numpy"], ["six"]]},
        {"schema": 1, "texts": TEXTS, "names": "numpy six"},
    ],
)
def test_an_entry_of_another_shape_is_a_miss(data: object) -> None:
    assert profile_cache.names_of(data, TEXTS) is None


@pytest.mark.parametrize(
    ("environ", "is_plain"),
    [
        ({}, True),
        ({"FORCE_COLOR": "1"}, False),
        ({"FORCE_COLOR": ""}, True),
        ({"TTY_COMPATIBLE": "1"}, False),
        ({"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, True),
    ],
)
def test_a_line_printed_without_rich_is_the_line_rich_prints(
    environ: dict[str, str], is_plain: bool
) -> None:
    """ui decides as rich does whether a stream is a terminal; where it is not, its lines
    (ok, info, warn, error) are rich's own, byte for byte, and rich is not loaded."""
    program = f"""
import io, os, sys
os.environ.update({environ!r})
sys.stdout, sys.stderr, real_err = io.StringIO(), io.StringIO(), sys.stderr
from envlock import ui
message = "generation 3 matches [bold]0c7a\\r\\x07 (fast\\tcheck)\\n\\tnext /x/[y] \\\\[z] "
def lines():
    ui.ok(message); ui.info(message); ui.warn(message); ui.error(message)
    return sys.stdout.getvalue() + sys.stderr.getvalue()
mine = lines()
print(ui.plain(), ui.plain(stderr=True), "rich" in sys.modules, file=real_err)
sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
ui._console.cache_clear()
ui.plain = lambda stderr=False: False  # rich's path, for the same streams
ui._console(stderr=False).print(f"[green]✓[/] {{ui.escape(message)}}")
ui._console(stderr=True).print(ui.escape(message))
ui._console(stderr=True).print(f"[yellow]warning:[/] {{ui.escape(message)}}")
ui._console(stderr=True).print(f"[bold red]error:[/] {{ui.escape(message)}}")
theirs = sys.stdout.getvalue() + sys.stderr.getvalue()
assert mine == theirs or not {is_plain!r}, (mine, theirs)
"""
    env = {**plain_environ(), **environ}
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.split() == [str(is_plain), str(is_plain), str(not is_plain)]


MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)), end='')"


def test_a_command_under_run_loads_nothing_of_envlocks_unless_asked(tmp_path: Path) -> None:
    """The start-up set on a command's PYTHONPATH (every Python it starts runs its
    sitecustomize first) imports the mega-cache module only when there is a file to load,
    and still runs the sitecustomize it shadows."""
    from envlock.runs.startup_set import package_dir, python_path

    chained = tmp_path / "theirs"
    chained.mkdir()
    (chained / "sitecustomize.py").write_text("import builtins\nbuiltins.chained = True\n")
    program = f"import builtins; assert builtins.chained; {MODULES}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ENVLOCK_"))}
    startup = python_path(package_dir(), api=True)

    def modules(**env: str) -> set[str]:
        proc = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            env={**base, "PYTHONPATH": f"{startup}{os.pathsep}{chained}", **env},
        )
        assert proc.returncode == 0, proc.stderr
        return set(json.loads(proc.stdout))

    alone = subprocess.run(
        [sys.executable, "-c", f"import builtins; builtins.chained = 1; {MODULES}"],
        capture_output=True,
        text=True,
        env=base,
        check=True,
    )
    # What the interpreter loads anyway (json: the program's own), plus the import system's
    # own finder (importlib.machinery: names for its frozen modules) the chaining uses.
    added = modules() - set(json.loads(alone.stdout))
    assert {m for m in added if m.split(".")[0] != "importlib"} <= {"sitecustomize", "warnings"}
    # Asked to load a mega-cache file (--compile-artifacts): it does, and says what it found.
    missing = tmp_path / "missing.bin"
    assert "envlock_megacache" in modules(ENVLOCK_COMPILE_ARTIFACTS=str(missing))


def test_the_agent_is_compressed_once_and_kept_only_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every agent call ships the agent's modules compressed; the compression is kept in the
    user's cache and used only when it decompresses to exactly the modules of this envlock."""
    import zlib

    from envlock.base.usercache import cache_dir
    from envlock.reconcile import agentcode as agentcall

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    compressed: list[int] = []
    real = zlib.compress
    monkeypatch.setattr(
        zlib, "compress", lambda data, level: compressed.append(1) or real(data, level)
    )

    def bootstrap() -> str:
        agentcall.agent_bootstrap.cache_clear()
        return agentcall.agent_bootstrap("probe")

    first = bootstrap()
    assert compressed and bootstrap() == first
    count = len(compressed)
    assert bootstrap() == first and len(compressed) == count  # read back, not compressed again
    # An entry that is not these modules (another code, another shape) is never shipped.
    (entry,) = Path(str(cache_dir(agentcall.PACKED))).glob("*.json")
    kept = json.loads(entry.read_text())
    evil = agentcall.base64.b64encode(real(b"import os; os.system('x')", 9)).decode()
    for data in ([[kept[0][0], evil], *kept[1:]], kept[1:], [[n, 1] for n, _ in kept], {}):
        entry.write_text(json.dumps(data))
        assert bootstrap() == first


def test_the_uv_version_of_a_remote_probe_is_read_without_importlib_metadata(
    tmp_path: Path,
) -> None:
    """Every remote probe's request names the uv envlock ships: read from its dist-info, as
    importlib.metadata finds it, without loading that module's ~50 (email, zipfile, …)."""
    from importlib.metadata import version

    program = (
        "import sys; from envlock.base.uvbin import uv_version; "
        "print(uv_version(), 'importlib.metadata' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert proc.stdout.split() == [version("uv"), "False"], proc.stderr
    from envlock.base.uvbin import dist_info_version

    for name, text in (
        ("uv_build-1.0.dist-info", "Name: uv-build\nVersion: 1.0\n"),
        ("uvloop-0.21.dist-info", "Name: uvloop\nVersion: 0.21\n"),
        ("uv-0.13.9.dist-info", "Metadata-Version: 2.4\nName: uv\nVersion: 0.13.9\n\nVersion: 9\n"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "METADATA").write_text(text)
    assert dist_info_version(str(tmp_path), "uv") == "0.13.9"
    assert dist_info_version(str(tmp_path / "missing"), "uv") is None


def test_the_probes_request_is_made_before_the_rules_that_judge_its_answer_load() -> None:
    """commands/ahead.py writes a probe's request once the profile and lock are read: what
    that needs (reconcile/context.py) loads neither the drift rules nor the state's types,
    which load while the probe works."""
    program = (
        "import sys, envlock.commands.ahead, envlock.reconcile.context; "
        "print(sorted(m for m in sys.modules if m.startswith('envlock.reconcile.')))"
    )
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.strip()
    assert "envlock.reconcile.context" in loaded
    assert "envlock.reconcile.drift" not in loaded and "envlock.reconcile.state" not in loaded
