"""Locks are data, and data never becomes code: hostile locks through every command.

A lock reaches uv: `python-version` becomes `uv venv --python VALUE` (a path there is run as
the interpreter), an sdist or a directory source is built (its backend runs), a package
without a name was a traceback. Each hostile lock below is the seed project's valid lock
with one thing changed, fed to every command that reads a lock — as the profile's own lock,
as a loose pylock for `diff`, and inside a snapshot for `apply --from-snapshot`. Each must
exit 2 naming the file and the field, with no traceback, and nothing may be built, run or
changed: canaries prove the hostile interpreter, the sdist's backend and the run's command
never ran; the root's generations, the profile and the lock stay as they were.

Then what may be built: only a package the profile names in `[dependencies] build`, never
from a snapshot, and a snapshot's `.pth` only with the user's leave (`--allow-pth`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import stat
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from envlock.agent.apply import sync_argv
from envlock.cli import COMMANDS as CLI_COMMANDS
from tests.conftest import run_envlock
from tests.projects import torch_profile_text, write_seed_project
from tests.support import UV
from tests.wheelhouse import build_sdist, build_wheel, build_wheelhouse

ENVLOCK = Path(__file__).resolve().parents[2] / "envlock"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Base:
    """The seed project locked and applied, its valid lock and snapshot, and the canaries."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.wheelhouse = build_wheelhouse(work / "wheelhouse")
        self.profile = write_seed_project(work / "p", self.wheelhouse)
        for args in (("lock", self.profile), ("apply", "-y", self.profile)):
            result = run_envlock(*args)
            assert result.returncode == 0, result.stderr
        made = run_envlock("snapshot", self.profile, work / "valid")
        assert made.returncode == 0, made.stderr
        self.doc: dict[str, Any] = json.loads(
            (work / "valid" / "envlock-snapshot.json").read_text()
        )
        self.lock_path = self.profile.parent / "pylock.seed.toml"
        self.valid_lock = self.lock_path.read_text()
        self.valid_copy = work / "valid-lock" / "pylock.seed.toml"
        self.valid_copy.parent.mkdir()
        self.valid_copy.write_text(self.valid_lock)
        self.root = self.profile.parent / "root"
        # A stand-in for a hostile interpreter: running it leaves a canary behind.
        self.canary = work / "canary"
        self.evil = work / "evil"
        self.evil.write_text(f"#!/bin/sh\ntouch {self.canary}\n")
        self.evil.chmod(self.evil.stat().st_mode | stat.S_IXUSR)
        # tinydep as an sdist whose backend leaves a line in `built` whenever it runs.
        self.built = work / "built"
        (work / "sdists").mkdir()
        self.sdist = build_sdist(work / "sdists", "tinydep", "1.0", self.built)
        self.ran = work / "ran"  # what `run`'s command would touch
        # The corpus's base is accepted: each refusal below is its one change's doing.
        assert run_envlock("check", self.profile).returncode == 0
        assert run_envlock("diff", self.lock_path, self.valid_copy).returncode == 0

    def world(self) -> tuple[Any, ...]:
        """What a refused command must leave as it found: generations, current, profile, lock."""
        generations = sorted(p.name for p in (self.root / "generations").iterdir())
        current = os.readlink(self.root / "current")
        return generations, current, self.profile.read_bytes(), self.lock_path.read_bytes()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    return Base(tmp_path_factory.mktemp("trustlock"))


# -- the hostile locks: (case, edit of the valid lock, what the message must name) -----------
Edit = Callable[[str, Base], str]
TINY = '[[packages]]\nname = "tinydep"\nversion = "1.0"\n'
TINY_WHEELS = re.compile(r'(name = "tinydep"\nversion = "1\.0"\n)wheels = \[[^\n]*\]\n')


def replacing(old: str, new: str) -> Edit:
    def edit(text: str, base: Base) -> str:
        assert old in text, old
        return text.replace(old, new.format(base=base), 1)

    return edit


def tiny_source(line: str) -> Edit:
    """tinydep's wheels replaced by another kind of source."""

    def edit(text: str, base: Base) -> str:
        changed, count = TINY_WHEELS.subn(
            lambda m: m.group(1) + line.format(base=base, sha=sha256(base.sdist)) + "\n", text
        )
        assert count == 1
        return changed

    return edit


def tiny_wheel(old: str, new: str) -> Edit:
    """tinydep's wheel entry with `old` changed to `new`."""

    def edit(text: str, base: Base) -> str:
        found = TINY_WHEELS.search(text)
        assert found and old in found.group(0), old
        return text.replace(found.group(0), found.group(0).replace(old, new, 1), 1)

    return edit


def not_tables(text: str, base: Base) -> str:
    return 'lock-version = "1.0"\npackages = ["tinydep"]\n\n' + text[text.index("[tool.envlock]") :]


def duplicated(text: str, base: Base) -> str:
    found = TINY_WHEELS.search(text)
    assert found
    block = f"[[packages]]\n{found.group(0)}\n"
    return text.replace("[tool.envlock]", block + "[tool.envlock]", 1)


HOSTILE: list[tuple[str, Edit, str]] = [
    (
        "python-version-a-path",
        replacing('python-version = "3.11"', 'python-version = "{base.evil}"'),
        "[tool.envlock] python-version: expected a Python version",
    ),
    (
        "python-platform",
        replacing('python-platform = "x86_64-manylinux_2_28"', 'python-platform = "$(reboot)"'),
        "[tool.envlock] python-platform: expected a Linux platform",
    ),
    (
        "directory-source",
        tiny_source('directory = {{ path = "{base.work}/src" }}'),
        "packages[3].directory: expected wheels or an sdist, found a directory source",
    ),
    (
        "vcs-source",
        tiny_source(
            'vcs = {{ type = "git", url = "https://example.invalid/t.git", '
            'commit-id = "0000000000000000000000000000000000000000" }}'
        ),
        "packages[3].vcs: expected wheels or an sdist, found a vcs source",
    ),
    (
        "archive-source",
        tiny_source(
            'archive = {{ url = "https://example.invalid/t.tar.gz", '
            'hashes = {{ sha256 = "{sha}" }} }}'
        ),
        "packages[3].archive: expected wheels or an sdist, found an archive source",
    ),
    (
        "sdist-not-in-build",
        tiny_source('sdist = {{ url = "file://{base.sdist}", hashes = {{ sha256 = "{sha}" }} }}'),
        'packages[3].sdist: expected wheels only, found an sdist of "tinydep"',
    ),
    (
        "package-without-name",
        replacing(TINY, '[[packages]]\nversion = "1.0"\n'),
        "packages[3].name: expected a value, found nothing (missing)",
    ),
    (
        "version-an-integer",
        replacing(TINY, '[[packages]]\nname = "tinydep"\nversion = 1\n'),
        "packages[3].version: expected a string, found 1",
    ),
    (
        "bad-name",
        replacing('name = "tinydep"', 'name = "tinydep; touch /tmp/x"'),
        "packages[3].name: expected a package name",
    ),
    (
        "bad-version",
        replacing(TINY, '[[packages]]\nname = "tinydep"\nversion = "1.0 --python=/tmp/x"\n'),
        "packages[3].version: expected a PEP 440 version",
    ),
    (
        "missing-hash",
        tiny_wheel(", hashes = { sha256 = ", ", size = 1, other = { sha256 = "),
        "packages[3].wheels[0].hashes: expected a sha256, found none",
    ),
    (
        "url-with-no-sha256",
        tiny_wheel("hashes = { sha256 = ", "hashes = { md5 = "),
        "packages[3].wheels[0].hashes.sha256: expected a value, found nothing",
    ),
    (
        "another-packages-wheel",
        tiny_wheel("tinydep-1.0-py3-none-any.whl", "trainutil-2.0-py3-none-any.whl"),
        'packages[3].wheels[0]: expected a wheel of "tinydep"',
    ),
    (
        "duplicate-package",
        duplicated,
        'packages[6].name: expected each package once, found "tinydep" again',
    ),
    ("packages-not-tables", not_tables, 'packages[0]: expected an object, found "tinydep"'),
    (
        "script-hash-a-number",
        replacing('"train.py" = "', '"train.py" = 7\n"other.py" = "'),
        "[tool.envlock] scripts.train.py: expected a string, found 7",
    ),
]

# -- every command that reads a lock: the profile's own, a loose pylock, a snapshot's --------
Argv = Callable[[Base, Path], list[Any]]
PROFILE_COMMANDS: dict[str, Argv] = {
    "apply": lambda b, s: ["apply", "-y", b.profile],
    "check": lambda b, s: ["check", b.profile],
    "plan": lambda b, s: ["plan", b.profile],
    "run": lambda b, s: ["run", b.profile, "--", "touch", b.ran],
    "rollback": lambda b, s: ["rollback", b.profile],
    "generations": lambda b, s: ["generations", b.profile],
    "gc": lambda b, s: ["gc", "-y", b.profile],
    "snapshot": lambda b, s: ["snapshot", b.profile, b.work / "snapshot-out"],
    "cache": lambda b, s: ["cache", b.profile, "status"],
    "add": lambda b, s: ["add", "-y", b.profile, "filelock"],
    "remove": lambda b, s: ["remove", "-y", b.profile, "trainutil"],
    "lock": lambda b, s: ["lock", "--check", b.profile],
}
OTHER_COMMANDS: dict[str, Argv] = {
    "diff": lambda b, s: ["diff", b.lock_path, b.valid_copy],
    "bisect": lambda b, s: ["bisect", b.profile, b.lock_path, b.valid_copy, "--", "touch", b.ran],
    "apply --from-snapshot": lambda b, s: ["apply", "-y", "--from-snapshot", s, b.profile],
    "apply --from-snapshot --force": lambda b, s: [
        *["apply", "-y", "--force", "--from-snapshot", s, b.profile]
    ],
}
# Commands that read no lock: `inspect` reads checkpoints, `data` datasets; `init` writes a
# profile (and with --from, a lock it resolved itself, through write_lock's validation).
READ_NO_LOCK = {"inspect", "data", "init"}


def assert_refused(result: subprocess.CompletedProcess[str], where: str, names: str) -> None:
    assert result.returncode == 2, (result.args, result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert f"{where}: " in result.stderr, result.stderr
    assert names in result.stderr, result.stderr


@pytest.mark.parametrize(("case", "edit", "names"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_lock_is_refused_by_every_command(
    base: Base, case: str, edit: Edit, names: str
) -> None:
    hostile = edit(base.valid_lock, base)
    snapshot_dir = base.work / "cases" / case
    snapshot_dir.mkdir(parents=True)
    doc = json.loads(json.dumps(base.doc))
    doc["lock"]["text"] = edit(doc["lock"]["text"], base)
    (snapshot_dir / "envlock-snapshot.json").write_text(json.dumps(doc))
    base.lock_path.write_text(hostile)
    try:
        before = base.world()
        commands = {**PROFILE_COMMANDS, **OTHER_COMMANDS}
        # Each is refused before it acts, so they may run side by side (wall time only).
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {
                name: pool.submit(run_envlock, *argv(base, snapshot_dir))
                for name, argv in commands.items()
            }
        results = {name: future.result() for name, future in futures.items()}
        for name, result in results.items():
            from_snapshot = name.startswith("apply --from-snapshot")
            where = snapshot_dir / "envlock-snapshot.json" if from_snapshot else base.lock_path
            assert_refused(result, str(where), names)
        assert base.world() == before, "a refused command changed the root, profile or lock"
        assert not base.canary.exists(), "the lock's interpreter was run"
        assert not base.built.exists(), "the lock's sdist was built"
        assert not base.ran.exists(), "run ran its command on a refused lock"
        assert not (base.work / "snapshot-out").exists()
    finally:
        base.lock_path.write_text(base.valid_lock)


def calls(tree: ast.AST) -> list[str]:
    """`a.b(...)` and `f(...)` as the dotted names called."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                found.append(f"{func.value.id}.{func.attr}")
            elif isinstance(func, ast.Name):
                found.append(func.id)
    return found


def test_no_path_goes_around_the_validator() -> None:
    """Lock text becomes data in lock_schema alone (tomlread parses profiles), and a `Lock`
    is made only by lock.parse_lock, behind it; and every command says above whether it
    reads a lock, so a new one cannot go around the rule unseen."""
    enumerated = set(PROFILE_COMMANDS) | {n.split()[0] for n in OTHER_COMMANDS} | READ_NO_LOCK
    assert enumerated == set(CLI_COMMANDS)
    readers: dict[str, set[str]] = {"tomllib.loads": set(), "tomllib.load": set(), "Lock": set()}
    for path in ENVLOCK.rglob("*.py"):
        rel = path.relative_to(ENVLOCK).as_posix()
        for name in calls(ast.parse(path.read_text())):
            if name in readers:
                readers[name].add(rel)
    assert readers == {
        "tomllib.loads": {"base/tomlread.py", "lock/schema.py"},
        "tomllib.load": set(),
        "Lock": {"lock/read.py"},
    }


# -- what may be built ---------------------------------------------------------------------------
def source_project(work: Path, build: str) -> tuple[Path, Path]:
    """A profile that needs mypkg, published here only as an sdist; (profile, its canary)."""
    built = work / "built"
    sdists = work / "sdists"
    sdists.mkdir(exist_ok=True)
    if not (sdists / "mypkg-1.0.tar.gz").exists():
        build_sdist(sdists, "mypkg", "1.0", built)
    profile = work / "p" / "src.toml"
    profile.parent.mkdir(exist_ok=True)
    text = torch_profile_text(
        "src", torch=None, packages=("mypkg",), find_links=(str(sdists),), offline=True
    )
    profile.write_text(text + build)
    return profile, built


def test_only_a_package_named_in_build_is_built(tmp_path: Path) -> None:
    profile, built = source_project(tmp_path, "")
    refused = run_envlock("lock", profile)
    assert refused.returncode == 2, refused.stderr
    assert 'add build = ["mypkg"] to [dependencies]' in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not built.exists(), "resolving ran the sdist's backend"
    assert not (profile.parent / "pylock.src.toml").exists()

    profile, built = source_project(tmp_path, 'build = ["mypkg"]\n')
    locked = run_envlock("lock", profile)
    assert locked.returncode == 0, locked.stderr
    lock_text = (profile.parent / "pylock.src.toml").read_text()
    assert "sdist = " in lock_text and 'build = ["mypkg"]' in lock_text
    applied = run_envlock("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    assert "build_wheel" in built.read_text().split()
    ran = run_envlock("run", profile, "--", "python", "-c", "import mypkg; print(mypkg.__file__)")
    assert ran.returncode == 0 and "site-packages/mypkg/" in ran.stdout, ran.stderr

    # A snapshot's lock never builds, whatever its profile allowed.
    made = run_envlock("snapshot", profile, tmp_path / "snap")
    assert made.returncode == 0, made.stderr
    again = run_envlock("apply", "-y", "--from-snapshot", tmp_path / "snap", profile)
    assert_refused(again, str(tmp_path / "snap"), "packages[0].sdist: expected wheels only")
    assert "a snapshot's lock never builds from source" in again.stderr

    # The build list is a resolution input: changing it stales the lock.
    profile.write_text(profile.read_text().replace('["mypkg"]', '["mypkg", "other"]'))
    stale = run_envlock("apply", "-y", profile)
    assert stale.returncode == 2 and "stale lock" in stale.stderr, stale.stderr
    # Dropped from the list, the lock's sdist is refused outright.
    profile.write_text(profile.read_text().replace('build = ["mypkg", "other"]\n', ""))
    dropped = run_envlock("apply", "-y", profile)
    assert_refused(dropped, str(profile.parent / "pylock.src.toml"), "packages[0].sdist")
    assert 'add "mypkg" to [dependencies] build' in dropped.stderr


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ('build = "mypkg"\n', "[dependencies] build: expected an array of strings"),
        ("build = [1]\n", "[dependencies] build[0]: expected a string, found an integer"),
        (
            'build = ["mypkg==1.0"]\n',
            '[dependencies] build[0]: expected a package name, found "mypkg==1.0"',
        ),
        ('build = ["mypkg", "MyPkg"]\n', '[dependencies] build[1]: duplicate package "MyPkg"'),
    ],
)
def test_the_build_list_is_validated(tmp_path: Path, build: str, message: str) -> None:
    profile, _ = source_project(tmp_path, build)
    result = run_envlock("lock", profile)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_install_itself_builds_nothing_unless_allowed(tmp_path: Path) -> None:
    """Even a lock that slipped past the validator cannot build: the agent's `uv pip sync`
    says --no-build unless the request names what may be built."""
    built = tmp_path / "built"
    sdist = build_sdist(tmp_path, "mypkg", "1.0", built)
    source = f'{{ url = "file://{sdist}", hashes = {{ sha256 = "{sha256(sdist)}" }} }}'
    lock = (
        'lock-version = "1.0"\ncreated-by = "test"\n\n[[packages]]\nname = "mypkg"\n'
        f'version = "1.0"\nsdist = {source}\n'
    )
    gen = tmp_path / "gen"
    venv = [UV, "venv", "-q", "--offline", "--no-python-downloads", "--python", "3.11", gen]
    subprocess.run(venv, check=True)
    (gen / ".envlock").mkdir()
    (gen / ".envlock" / "pylock.toml").write_text(lock)
    env = {**os.environ, "UV_OFFLINE": "1"}

    refused = subprocess.run(sync_argv({"uv": UV}, str(gen)), capture_output=True, env=env)
    assert refused.returncode != 0 and b"no-build" in refused.stderr
    assert not built.exists()
    others = {"uv": UV, "build": ["mypkg"], "binary_only": ["tinydep"]}
    allowed = subprocess.run(sync_argv(others, str(gen)), capture_output=True, env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert "build_wheel" in built.read_text().split()


# -- a snapshot's .pth ------------------------------------------------------------------------
def test_a_snapshot_installing_a_pth_needs_the_users_leave(tmp_path: Path) -> None:
    """A .pth or sitecustomize.py runs in every interpreter of the environment: from a
    stranger's snapshot, only with `--allow-pth PACKAGE` for each package that ships one.
    Refused, the generation is removed and never ran."""
    wheelhouse = build_wheelhouse(tmp_path / "wheelhouse")
    canary = tmp_path / "pth-ran"
    hook = f"import os; open({str(canary)!r}, 'a').write('ran')\n"
    wheel = build_wheel(
        wheelhouse, "pthpkg", "1.0", files={"pthpkg/__init__.py": "", "pthpkg-hook.pth": hook}
    )
    custom = build_wheel(
        wheelhouse, "sitepkg", "1.0", files={"sitepkg/__init__.py": "", "sitecustomize.py": hook}
    )
    profile = write_seed_project(tmp_path / "p", wheelhouse)
    for args in (
        ("lock", profile),
        ("apply", "-y", profile),
        ("snapshot", profile, tmp_path / "s"),
    ):
        result = run_envlock(*args)
        assert result.returncode == 0, result.stderr
    snap = tmp_path / "s" / "envlock-snapshot.json"
    doc = json.loads(snap.read_text())
    entries = "".join(
        f'[[packages]]\nname = "{name}"\nversion = "1.0"\n'
        f'wheels = [{{ url = "file://{file}", hashes = {{ sha256 = "{sha256(file)}" }} }}]\n\n'
        for name, file in (("pthpkg", wheel), ("sitepkg", custom))
    )
    doc["lock"]["text"] = doc["lock"]["text"].replace("[tool.envlock]", entries + "[tool.envlock]")
    snap.write_text(json.dumps(doc))
    root = profile.parent / "root"

    def world() -> tuple[list[str], str]:
        return sorted(p.name for p in (root / "generations").iterdir()), os.readlink(
            root / "current"
        )

    before = world()
    refused = run_envlock("apply", "-y", "--from-snapshot", tmp_path / "s", profile)
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "pthpkg (pthpkg-hook.pth), sitepkg (sitecustomize.py)" in refused.stderr
    assert "--allow-pth pthpkg --allow-pth sitepkg" in refused.stderr
    assert world() == before, "a refused generation was left or switched to"
    assert not canary.exists(), "the snapshot's startup code ran"

    one = ("--allow-pth", "pthpkg")
    other = run_envlock("apply", "-y", *one, "--from-snapshot", tmp_path / "s", profile)
    assert other.returncode == 2, other.stderr
    assert "--allow-pth sitepkg" in other.stderr and "pthpkg (" not in other.stderr
    alone = run_envlock("apply", "-y", "--allow-pth", "pthpkg", profile)
    assert alone.returncode == 2 and "--allow-pth goes with --from-snapshot" in alone.stderr

    both = (*one, "--allow-pth", "SitePkg")  # named as the user likes: normalised
    allowed = run_envlock("apply", "-y", *both, "--from-snapshot", tmp_path / "s", profile)
    assert allowed.returncode == 0, allowed.stderr
    assert world()[1] != before[1]
