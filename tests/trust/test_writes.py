"""What root's processes write and load is root's (issue 24, item 6), staged with a second
local user in directories both may write: the swapped temp file of a snapshot write, a link
planted at the mega-cache's temp path, another user's root (its interpreter never runs) and
its `.envlock.lock` link, a compile-cache dir another user owns, `cache save --force` onto a
link or a device, and a scan that fails when code outside the one write function writes files.

Runs as root (as the suite does); the second user is created once (`useradd -m`).
"""

from __future__ import annotations

import ast
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlock.agent import core as agent_core
from envlock.base import atomic, ownership
from envlock.startup import envlock_megacache
from tests.conftest import run_envlock
from tests.projects import torch_profile_text

# Each test plants links and swaps files while envlock writes: in a mount namespace of
# its own, with a /dev of its own, where the kernel allows it (tests/mountns.py).
pytestmark = pytest.mark.usefixtures("private_mounts")

USER = "envlock-t24w"
# The other user's Python: the system's (envlock's venv may lie where they cannot reach).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"
PACKAGE = Path(__file__).resolve().parents[2] / "envlock"
FAKE_TORCH = """
[dependencies]
find-links = ["{wheelhouse}"]
offline = true
"""


# -- the second user and the directories both of us may write ------------------------------
@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    """A second local user (created once; concurrent sessions may race to create it)."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        proc = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True)
        assert proc.returncode in (0, 9), f"useradd -m {USER}: {proc.stderr}"  # 9: exists
        return pwd.getpwnam(USER)


def as_other(other: pwd.struct_passwd, code: str, *args: str, **kw: Any) -> Any:
    """Python code run as the other user, in a process of its own (not root)."""
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", textwrap.dedent(code), *args],
        user=other.pw_uid,
        group=other.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"HOME": other.pw_dir, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        **kw,
    )


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """/tmp/envlock-t24w-*/ (root's, 0755): `share` is sticky and world-writable like /tmp,
    `open` world-writable like a team's checkpoint folder, `private` root's alone."""
    top = Path(tempfile.mkdtemp(prefix="envlock-t24w-", dir="/tmp"))
    top.chmod(0o755)
    for name, mode in (("share", 0o1777), ("open", 0o777), ("private", 0o700)):
        (top / name).mkdir()
        (top / name).chmod(mode)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def dev_null_stays_a_device() -> Iterator[None]:
    """No test here may replace the real /dev/null (the suite's ssh needs it)."""
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    yield
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode), "/dev/null is no longer a device"


def secret(base: Path, name: str) -> Path:
    """A root-only file: what a planted link would aim at."""
    path = base / "private" / name
    path.write_text("root's secret\n")
    path.chmod(0o600)
    return path


def unchanged(path: Path) -> tuple[int, bytes]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), path.read_bytes()


# -- one write function, wherever it runs -----------------------------------------------------
# The agent's write_atomic, as the controller calls it (envlock's errors), as the agent runs it,
# and as the start-up set loads it from agent/core.py (envlock_megacache, envlock.snapshot()).
WRITERS: dict[str, Callable[..., None]] = {
    "controller": atomic.write_atomic,
    "agent": agent_core.write_atomic,
    "startup": envlock_megacache.agent_core()["write_atomic"],
}


def shape(path: Path, what: str, victim: Path) -> None:
    if what == "regular":
        path.write_text("old")
        path.chmod(0o600)
    elif what == "symlink":
        path.symlink_to(victim)
    elif what == "dangling-symlink":
        path.symlink_to(victim.with_name("nothing-here"))
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "char-device":  # a /dev/null of our own: same major and minor
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif what == "directory":
        path.mkdir()
    elif what == "planted-temp-links":  # the temp names the old writers used
        for tmp in (f"{path}.{os.getpid()}.tmp", f"{path.parent}/.{path.name}.planted.tmp"):
            os.symlink(victim, tmp)


def outcome(tmp_path: Path, writer: str, what: str) -> dict[str, Any]:
    where = tmp_path / writer
    where.mkdir()
    victim = where / "victim"
    victim.write_text("victim")
    path = where / "dest"
    shape(path, what, victim)
    before = set(os.listdir(where))
    try:
        WRITERS[writer](str(path), b"new", 0o640)
        refused = False
    except Exception:  # each caller sees its own kind of error
        refused = True
    st = os.lstat(path)
    return {
        "refused": refused,
        "dest": agent_core.kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else "a file",
        "content": path.read_bytes() if stat.S_ISREG(st.st_mode) else None,
        "mode": stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None,
        "victim": victim.read_bytes(),
        "left_behind": sorted(set(os.listdir(where)) - before - {"dest"}),
    }


@pytest.mark.parametrize(
    ("what", "refused", "dest"),
    [
        ("absent", False, "a file"),
        ("regular", False, "a file"),
        ("planted-temp-links", False, "a file"),
        ("symlink", True, "a symlink"),
        ("dangling-symlink", True, "a symlink"),
        ("fifo", True, "a FIFO"),
        ("char-device", True, "a character device"),
        ("directory", True, "a directory"),
    ],
)
def test_the_atomic_write_behaves_the_same_wherever_it_runs(
    tmp_path: Path, what: str, refused: bool, dest: str
) -> None:
    seen = {writer: outcome(tmp_path, writer, what) for writer in WRITERS}
    assert seen["agent"] == seen["controller"] == seen["startup"], seen
    got = seen["controller"]
    assert (got["refused"], got["dest"], got["victim"]) == (refused, dest, b"victim")
    assert got["left_behind"] == []  # no temp file stays, written or refused
    if not refused:
        # The mode is the one asked for, whatever the umask: set on the descriptor.
        assert (got["content"], got["mode"]) == (b"new", 0o640)


def test_a_refusal_names_the_file_and_what_to_do(tmp_path: Path) -> None:
    link, own_null = tmp_path / "snapshot.json", tmp_path / "null"
    os.mknod(own_null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the test's own, not the host's
    link.symlink_to(own_null)
    with pytest.raises(atomic.NotRegularFile) as info:
        atomic.write_atomic(link, b"{}")
    assert str(link) in info.value.message and "a symlink" in info.value.message
    assert info.value.exit_code == 2


# -- race: the temp file swapped for a link while root writes a snapshot ---------------------
# The other user renames a link to root's secret over every temp file that appears in the
# shared folder: before the fix, the chmod by name made the secret world-readable.
SWAPPER = """
import os, sys
folder, victim, stop = sys.argv[1:4]
swaps = n = 0
while not os.path.exists(stop):
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name == "envlock-snapshot.json" or name.startswith("x-") or os.path.islink(path):
            continue
        n += 1
        link = os.path.join(folder, "x-%d" % n)
        try:
            os.symlink(victim, link)
            os.rename(link, path)
            swaps += 1
        except OSError:
            try:
                os.unlink(link)
            except OSError:
                pass
print(swaps)
"""


def snapshot_writers() -> dict[str, Callable[[Path, bytes], object]]:
    """`envlock snapshot` / `run --snapshot-into` (the controller), `envlock.snapshot()` in a
    run (the agent's write, as snapshot_doc runs it there) and the agent's own."""
    from envlock.runs.snapshot_file import write_snapshot

    return {
        "controller": lambda folder, data: write_snapshot(folder, {"data": data.hex()}),
        "api": lambda folder, data: api_write_file()(str(folder / "envlock-snapshot.json"), data),
        "agent": lambda folder, data: agent_core.write_atomic(
            str(folder / "envlock-snapshot.json"), data
        ),
    }


def api_write_file() -> Callable[[str, bytes], None]:
    """snapshot_doc's write_file as `envlock.snapshot()` runs it inside a run: in one
    namespace with the files the in-process API loads (its SHARED list), not envlock's."""
    api = (PACKAGE / "startup" / "envlock_api" / "envlock" / "__init__.py").read_text()
    shared = next(
        ast.literal_eval(node.value)
        for node in ast.parse(api).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SHARED"
    )
    space: dict[str, Any] = {"__name__": "envlock_doc", "__envlock_agent__": True}
    for rel in shared:
        exec(compile((PACKAGE / rel).read_text(), rel, "exec"), space)
    return space["write_file"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("writer", list(snapshot_writers()))
def test_a_swapped_temp_file_never_changes_a_root_only_file(
    base: Path, other: pwd.struct_passwd, writer: str
) -> None:
    folder = base / "open" / f"ckpt-{writer}"
    folder.mkdir()
    folder.chmod(0o777)
    victim = secret(base, f"secret-{folder.name}")
    before = unchanged(victim)
    stop = base / f"stop-{folder.name}"
    swapper = subprocess.Popen(
        [SYSTEM_PYTHON, "-c", SWAPPER, str(folder), str(victim), str(stop)],
        user=other.pw_uid,
        group=other.pw_gid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
    )
    write = snapshot_writers()[writer]
    written = 0
    try:
        for _ in range(150):  # bounded: each write is a chance for the other user
            try:
                write(folder, os.urandom(1 << 17))
                written += 1
            except Exception:
                pass  # it noticed its temp file was replaced, or a link at the name: refused
            assert unchanged(victim) == before, "root's secret changed through a swapped link"
    finally:
        stop.touch()
        swaps = int(swapper.communicate(timeout=60)[0] or 0)
    # (The other user may write the folder, so they can put a link at the snapshot's own
    # name whenever they like: what matters is that root never writes or chmods through one.)
    assert swaps > 0, "the race was never staged: the other user swapped nothing"
    # On a loaded machine the other user may win every try (each then refused): that the
    # writer does write is shown where nobody races it.
    if written == 0:
        calm = folder.parent / f"{folder.name}-calm"
        calm.mkdir()
        write(calm, b"{}")
        assert any(calm.iterdir()), "the writer wrote nothing even unraced"


# -- envlock_megacache.save(PATH): a link planted at its temp path --------------------------
MEGACACHE_SAVE = """\
import sys
import torch
import envlock_megacache

model = torch.compile(torch.nn.Linear(4, 4))
with torch.no_grad():
    model(torch.randn(2, 4))
print("compiled", flush=True)
sys.stdin.readline()
envlock_megacache.save(sys.argv[1])
print("saved", flush=True)
"""


def test_a_link_planted_at_the_megacache_temp_path_is_not_written_through(
    base: Path, other: pwd.struct_passwd, torch_python: Path, tmp_path: Path
) -> None:
    folder = base / "open" / "artifacts"
    folder.mkdir()
    folder.chmod(0o777)
    victim = secret(base, "secret-megacache")
    before = unchanged(victim)
    target = folder / "artifacts.bin"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(PACKAGE / "startup"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TMPDIR": str(tmp_path),
    }
    saver = subprocess.Popen(
        [str(torch_python), "-c", MEGACACHE_SAVE, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert saver.stdout is not None and saver.stdin is not None
    assert saver.stdout.readline().strip() == "compiled", saver.communicate()[1]
    # The other user knows root's pid (ps) and plants a link at the temp name it will use.
    planted = as_other(
        other,
        "import os, sys\nos.symlink(sys.argv[1], sys.argv[2])",
        str(victim),
        f"{target}.{saver.pid}.tmp",
    )
    assert planted.returncode == 0, planted.stderr
    out, err = saver.communicate("go\n", timeout=300)
    assert saver.returncode == 0 and "saved" in out, err
    assert unchanged(victim) == before, "the mega-cache was written through the planted link"
    assert not target.is_symlink() and target.read_bytes().startswith(b"ENVLOCK-MEGACACHE\n")


# -- a root (and its lock file) that another user made first ---------------------------------
def fake_profile(folder: Path, name: str, wheelhouse: Path, root: Path, extra: str = "") -> Path:
    """A profile of the suite's fake torch (offline, no compile) whose root is `root`."""
    folder.mkdir(parents=True, exist_ok=True)
    text = torch_profile_text(
        name, torch="2.11.0", extra=FAKE_TORCH.format(wheelhouse=wheelhouse) + extra
    )
    profile = folder / f"{name}.toml"
    profile.write_text(text.replace('root = "root"', f'root = "{root}"'))
    locked = run_envlock("lock", profile)
    assert locked.returncode == 0, locked.stderr
    return profile


PLANT_ROOT = """
import os, sys
root, canary, victim = sys.argv[1:4]
gen = os.path.join(root, "generations", "1-000000000000")
os.makedirs(os.path.join(gen, "bin"))
os.makedirs(os.path.join(gen, ".envlock"))
with open(os.path.join(gen, ".envlock", "generation.json"), "w") as handle:
    handle.write('{"number": 1}')
python = os.path.join(gen, "bin", "python")
with open(python, "w") as handle:  # leaves a canary, then behaves like python
    handle.write('#!/bin/sh\\necho ran >> %s\\nexec /usr/bin/python3 "$@"\\n' % canary)
os.chmod(python, 0o755)
os.symlink("generations/1-000000000000", os.path.join(root, "current"))
os.symlink(victim, os.path.join(root, ".envlock.lock"))
"""


def test_another_users_root_is_refused_and_its_python_never_runs(
    base: Path, other: pwd.struct_passwd, wheelhouse: Path, tmp_path: Path
) -> None:
    root = base / "share" / "theirs"  # whoever creates it first in a sticky dir owns it
    canary = base / "open" / "canary-root"
    victim = secret(base, "secret-lock")
    before = unchanged(victim)
    made = as_other(other, "import os, sys\nos.mkdir(sys.argv[1])", str(root))
    assert made.returncode == 0, made.stderr
    planted = as_other(other, PLANT_ROOT, str(root), str(canary), str(victim))
    assert planted.returncode == 0, planted.stderr
    listing = sorted(os.listdir(root))
    profile = fake_profile(tmp_path, "theirs", wheelhouse, root)

    check = run_envlock("check", profile)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "root-owner" in check.stdout and f"owned by {USER}" in check.stdout
    for argv in (["run", profile, "--", "true"], ["run", "--allow-drift", profile, "--", "true"]):
        run = run_envlock(*argv)
        assert run.returncode == 1 and "not yours" in run.stderr, run.stdout + run.stderr
    apply = run_envlock("apply", "-y", profile)
    assert apply.returncode == 3, apply.stdout + apply.stderr
    assert "refusing to apply" in apply.stderr and "move the root aside" in apply.stderr
    assert not canary.exists(), "envlock ran the other user's interpreter as root"
    assert unchanged(victim) == before, "the planted .envlock.lock link was written through"
    assert sorted(os.listdir(root)) == listing  # nothing written into their root


@pytest.mark.parametrize("who", ["other user", "leftover"])
def test_a_planted_lock_file_link_is_never_written_through(
    base: Path, other: pwd.struct_passwd, wheelhouse: Path, tmp_path: Path, who: str
) -> None:
    """A root of ours that others may write (made with umask 0): the other user plants the
    lock link, and apply refuses the root. A link left in a root that is ours alone (made
    while it was open, say): the lock is opened without following it."""
    root = base / "share" / f"ours-{who.split()[0]}"
    root.mkdir()
    root.chmod(0o777)
    victim = secret(base, f"secret-{root.name}")
    before = unchanged(victim)
    if who == "other user":
        link = "import os, sys\nos.symlink(sys.argv[1], sys.argv[2])"
        planted = as_other(other, link, str(victim), str(root / ".envlock.lock"))
        assert planted.returncode == 0, planted.stderr
    else:
        (root / ".envlock.lock").symlink_to(victim)
        root.chmod(0o755)
    profile = fake_profile(tmp_path, f"lock{who.split()[0]}", wheelhouse, root)
    apply = run_envlock("apply", "-y", profile)
    assert apply.returncode == 3, apply.stdout + apply.stderr
    assert unchanged(victim) == before, "the lock file's link was followed"
    assert (root / ".envlock.lock").is_symlink()


# -- a compile-cache dir another user owns ---------------------------------------------------
@pytest.fixture(scope="module")
def applied(
    base: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """A root of ours, applied once, whose compile-cache dir lies in the shared folder."""
    folder = tmp_path_factory.mktemp("trust-writes")
    cache = base / "share" / "cache"
    extra = f'\n[cache]\ndir = "{cache}"\n'
    profile = fake_profile(folder, "cached", wheelhouse, folder / "root", extra)
    apply = run_envlock("apply", "-y", profile)
    assert apply.returncode == 0, apply.stdout + apply.stderr
    return {"profile": profile, "cache": cache, "folder": folder}


def active_cache(profile: Path) -> Path:
    status = json.loads(run_envlock("cache", profile, "status", "--json").stdout)
    return Path(next(entry["dir"] for entry in status["dirs"] if entry["active"]))


def test_a_cache_dir_another_user_owns_is_reported_and_never_exported(
    applied: dict[str, Path], other: pwd.struct_passwd
) -> None:
    profile, cache = applied["profile"], applied["cache"]
    shown = run_envlock("run", profile, "--", "env")
    assert shown.returncode == 0 and f"TORCHINDUCTOR_CACHE_DIR={cache}/" in shown.stdout
    # Gone (a tmp cleaner), and the other user makes it first, with something torch loads.
    shutil.rmtree(cache)
    code = "import os, sys\nos.makedirs(os.path.join(sys.argv[1], 'x'))"
    made = as_other(other, code, str(cache))
    assert made.returncode == 0, made.stderr
    try:
        check = run_envlock("check", profile)
        assert check.returncode == 1, check.stdout + check.stderr
        assert "cache-owner" in check.stdout and f"owned by {USER}" in check.stdout
        for argv in (["run", profile, "--", "env"], ["run", "--allow-drift", profile, "--", "env"]):
            run = run_envlock(*argv)
            assert run.returncode == 1 and "not yours" in run.stderr, run.stdout + run.stderr
            assert "TORCHINDUCTOR_CACHE_DIR" not in run.stdout
        apply = run_envlock("apply", "-y", profile)
        assert apply.returncode == 3 and "refusing to apply" in apply.stderr, apply.stderr
    finally:
        shutil.rmtree(cache)  # ours again: apply re-creates it for the other tests
        assert run_envlock("apply", "-y", profile).returncode == 0


# -- cache save --force replaces only a regular file -----------------------------------------
# (A directory FILE is refused by the option's type already, with exit 2.)
@pytest.mark.parametrize("what", ["symlink", "dangling-symlink", "char-device", "fifo"])
def test_cache_save_force_never_replaces_what_is_not_a_regular_file(
    applied: dict[str, Path], tmp_path: Path, what: str
) -> None:
    profile = applied["profile"]
    warm = active_cache(profile) / "inductor" / "kernel.bin"
    warm.parent.mkdir(parents=True, exist_ok=True)
    warm.write_bytes(b"compiled")  # a warm cache: save has something to write
    victim = tmp_path / "victim"
    victim.write_text("victim")
    file = tmp_path / "archive.tar.gz"
    shape(file, what, victim)
    kind = agent_core.kind_of(os.lstat(file).st_mode)
    saved = run_envlock("cache", profile, "save", "--force", file)
    assert saved.returncode == 2, saved.stdout + saved.stderr
    assert "not a regular file" in saved.stderr and str(file) in saved.stderr
    assert agent_core.kind_of(os.lstat(file).st_mode) == kind and victim.read_bytes() == b"victim"
    # A regular file is still replaced, as --force says.
    file.unlink()
    file.write_text("old archive")
    assert run_envlock("cache", profile, "save", "--force", file).returncode == 0
    assert file.read_bytes()[:2] == b"\x1f\x8b"  # gzip


# -- the ownership rule: one function, the agent's, judging the controller's paths too ---------
def test_the_ownership_rule_on_the_shapes_a_root_takes(
    base: Path, other: pwd.struct_passwd
) -> None:
    top = base / "private" / "rule"
    top.mkdir()
    theirs = base / "share" / "rule-theirs"
    as_other(other, "import os, sys\nos.makedirs(sys.argv[1])", str(theirs / "inner"))
    (top / "ours").mkdir()
    (top / "ours").chmod(0o755)
    (top / "group-writable").mkdir()
    (top / "group-writable").chmod(0o775)
    (top / "open").mkdir()
    (top / "open").chmod(0o777)
    (top / "open" / "inside").mkdir()
    (top / "link-to-ours").symlink_to(top / "ours")
    their_link = base / "share" / "rule-their-link"
    as_other(
        other, "import os, sys\nos.symlink(*sys.argv[1:3])", str(top / "ours"), str(their_link)
    )
    shapes = {
        top / "ours": True,
        base / "share" / "rule-ours-to-be": True,  # not there yet, in a sticky parent
        top / "link-to-ours" / "root": True,  # through root's own link
        base / "share": False,  # the sticky dir itself: others may write it
        theirs: False,
        theirs / "inner": False,
        theirs / "not-yet": False,
        top / "group-writable": False,
        top / "open" / "inside": False,  # a parent others may write, not sticky
        top / "link-to-ours": False,  # the path itself a link
        their_link / "root": False,  # through the other user's link
    }
    assert ownership.untrusted is agent_core.untrusted  # the controller's is the agent's
    for path, trusted in shapes.items():
        verdict = ownership.untrusted(str(path))
        assert (verdict is None) == trusted, (path, verdict)


# -- no other code in envlock/ writes files ---------------------------------------------------
# (file, function) -> the os.O_* flags its writes must carry: the write functions themselves,
# and the few streams that cannot be one buffer.
ALLOWED = {
    ("agent/core.py", "create_temp"): {"O_EXCL", "O_NOFOLLOW"},
    # write_atomic inside a directory opened by descriptor (the private caches).
    ("agent/core.py", "write_at"): {"O_EXCL", "O_NOFOLLOW"},
    # The root's flock file: reopened every time, never through a link.
    ("agent/apply.py", "__enter__"): {"O_NOFOLLOW"},
    # history.jsonl grows by a line (O_APPEND), never through a link.
    ("agent/core.py", "append_history"): {"O_NOFOLLOW"},
    # A cache archive streamed to stdout (no file of ours is opened).
    ("agent/cache.py", "cache_save"): set(),
    # run's startup set (the agent's `run` and the installer): new files in a fresh temp
    # dir, renamed into place once their hashes match.
    ("agent/start.py", "install_startup_set"): {"O_EXCL", "O_NOFOLLOW"},
    # The launcher's .pid file: a new file, locked, renamed into place.
    ("agent/programs/launcher.py", "write_pid"): {"O_EXCL", "O_NOFOLLOW"},
    # A command that cannot start: its refusal for `run --json`, a new 0600 file in the
    # root's private run/ (read back and removed by the controller).
    ("agent/start.py", "say_refused"): {"O_EXCL", "O_NOFOLLOW"},
    # A tracker's redacted copy of a snapshot: a new file in a private temporary directory.
    ("integrations/tracked.py", "source_file"): {"O_EXCL", "O_NOFOLLOW"},
}


def shipped_programs() -> dict[str, tuple[str, dict[str, set[str]]]]:
    """Programs shipped to a target, as built (run there), with the writes each may make:
    they are checked the same way as the modules they are built from. The agent's code cache
    goes through the agent's write_atomic."""
    from envlock.reconcile.agentcall import agent_bootstrap
    from envlock.runs.launch import LAUNCHER
    from envlock.runs.startup_set import INSTALLER

    def allowed(*modules: str) -> dict[str, set[str]]:
        return {scope: flags for (rel, scope), flags in ALLOWED.items() if rel in modules}

    return {
        "agent bootstrap": (agent_bootstrap("probe"), {}),
        "startup installer": (INSTALLER, allowed("agent/start.py")),
        "remote launcher": (LAUNCHER, allowed("agent/start.py", "agent/programs/launcher.py")),
    }


READ_FLAGS = {"O_RDONLY", "O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "O_NONBLOCK"}


def names_of_flags(node: ast.AST, constants: dict[str, ast.AST]) -> set[str]:
    """The os.O_* names an expression combines (module-level names followed)."""
    found: set[str] = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Attribute) and part.attr.startswith("O_"):
            found.add(part.attr)
        elif isinstance(part, ast.Name) and part.id in constants:
            found |= names_of_flags(constants[part.id], {})
    return found


def writes(tree: ast.AST) -> Iterator[tuple[str, int, str, set[str] | None]]:
    """(function, line, what, flags) of each call that writes a file; flags are None when
    the call is not an os.open."""
    constants = {
        target.id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def visit(node: ast.AST, scope: str) -> Iterator[tuple[str, int, str, set[str] | None]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                yield from judge_call(scope, child, constants)
            function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            yield from visit(child, child.name if function else scope)  # type: ignore[attr-defined]

    yield from visit(tree, "<module>")


def judge_call(
    scope: str, call: ast.Call, constants: dict[str, ast.AST]
) -> Iterator[tuple[str, int, str, set[str] | None]]:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
    if owner == "os" and name == "open":
        # Flags nobody can name (a parameter, say) count as a write.
        flags = names_of_flags(call.args[1], constants) if len(call.args) > 1 else set()
        if not flags or not flags <= READ_FLAGS:
            yield scope, call.lineno, "os.open", flags
    elif name == "open":  # builtin, Path.open, tarfile.open...: by their mode
        mode = call.args[1] if len(call.args) > 1 else None
        mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
        text = mode.value if isinstance(mode, ast.Constant) else "r"
        if set(str(text)) & set("wax+"):
            yield scope, call.lineno, f"{name}(mode={text!r})", None
    elif name in ("write_text", "write_bytes", "chmod", "lchmod", "mknod", "mkfifo") or (
        owner == "shutil" and (name.startswith("copy") and name != "copyfileobj")
    ):
        yield scope, call.lineno, name, None


def the_scan_sees_the_writes_it_forbids() -> None:
    """The scan itself, on the shapes it must catch (a scan that finds nothing proves nothing)."""
    program = textwrap.dedent(
        """
        import os, shutil
        FLAGS = os.O_WRONLY | os.O_CREAT
        def f(path, flags):
            open(path, "w").write("x")
            path.write_text("x")
            os.open(path, FLAGS, 0o644)
            os.open(path, flags)
            os.chmod(path, 0o600)
            shutil.copy(path, path + ".bak")
            open(path).read()
            os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        """
    )
    seen = [(scope, what) for scope, _line, what, _flags in writes(ast.parse(program))]
    assert seen == [
        ("f", "open(mode='w')"),
        ("f", "write_text"),
        ("f", "os.open"),
        ("f", "os.open"),
        ("f", "chmod"),
        ("f", "copy"),
    ]


def test_no_code_outside_the_write_functions_writes_files() -> None:
    the_scan_sees_the_writes_it_forbids()
    found = []
    for module in sorted(PACKAGE.rglob("*.py")):
        rel = module.relative_to(PACKAGE).as_posix()
        for scope, line, what, flags in writes(ast.parse(module.read_text())):
            required = ALLOWED.get((rel, scope))
            if required is None or (flags is not None and not required <= flags):
                found.append(f"{rel}:{line} {scope}: {what} {sorted(flags or ())}")
    for name, (program, allowed) in shipped_programs().items():
        for scope, line, what, flags in writes(ast.parse(program)):
            required = allowed.get(scope)
            if required is None or (flags is not None and not required <= flags):
                found.append(f"{name}:{line} {scope}: {what} {sorted(flags or ())}")
    assert found == [], "files written outside envlock's write functions:\n" + "\n".join(found)
